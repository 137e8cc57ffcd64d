"""A job's object-store checkpoint location, checked before the job is submitted.

A job whose checkpoints go to a bucket that does not exist, or that its credentials cannot write,
would start every pod, train, and fail at its first save, possibly hours in. So the client checks
first, as it checks every other field: the Secret the job names (``kubetrain.dev/checkpoint-secret``)
must exist in its namespace, and a probe object written to the location with that Secret's
credentials (and then deleted) must be accepted. Only a definite answer refuses the job: the store
said the bucket does not exist or the credentials may not write. When the submitter cannot tell (the
store's endpoint is reachable from the pods only, the submitter may not read Secrets, or the store's
fsspec package is not installed where the job is submitted), the job goes ahead and the pods find out.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from kubetrain import naming
from kubetrain.client.errors import InvalidJobError
from kubetrain.locations import is_url

log = logging.getLogger("kubetrain.client")
Obj = dict[str, Any]
PROBE_TIMEOUT = 5  # seconds to connect and to read: a store the submitter cannot reach is not waited on


async def check_checkpoint_location(core: client.CoreV1Api, body: Obj, namespace: str) -> None:
    """Raise ``InvalidJobError`` when the job's object-store checkpoint location cannot be used."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    location = str(annotations.get(naming.ANNOTATION_CHECKPOINT_DIR) or "")
    if not is_url(location):
        return
    secret = annotations.get(naming.ANNOTATION_CHECKPOINT_SECRET)
    env: dict[str, str] | None = {}
    if secret:
        env = await _secret_env(core, str(secret), namespace)
    if env is None:
        return
    refused = await asyncio.to_thread(probe, location, env)
    if refused:
        raise InvalidJobError(
            f"{naming.ANNOTATION_CHECKPOINT_DIR} {location} cannot be written"
            f"{f' with the credentials of Secret {namespace}/{secret}' if secret else ''}: {refused}"
        )


async def _secret_env(core: client.CoreV1Api, name: str, namespace: str) -> dict[str, str] | None:
    """The Secret's keys and values; None when the submitter may not read it (the pods still may)."""
    try:
        found = await core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise InvalidJobError(
                f"{naming.ANNOTATION_CHECKPOINT_SECRET} names Secret {name}, which namespace {namespace} "
                "does not have; create it with the object store's credentials (on the local cluster: "
                f"kubetrain dev object-store --secret {name} -n {namespace})"
            ) from None
        if exc.status == 403:
            log.info(
                "cannot read Secret %s/%s to check the checkpoint location; the pods will", namespace, name
            )
            return None
        raise
    return {key: base64.b64decode(value).decode() for key, value in (found.data or {}).items()}


def probe(location: str, env: Mapping[str, str]) -> str | None:
    """Write and delete a probe object at ``location`` with the credentials in ``env`` (the AWS_*
    variables of an S3 store; nothing: the default chain); what the store refused, or None."""
    try:
        import fsspec
    except ImportError:
        return None
    options: dict[str, Any] = {"skip_instance_cache": True}
    if location.startswith("s3://"):
        options["config_kwargs"] = {
            "connect_timeout": PROBE_TIMEOUT,
            "read_timeout": PROBE_TIMEOUT,
            "retries": {"max_attempts": 1},
        }
        for variable, option in (
            ("AWS_ACCESS_KEY_ID", "key"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "token"),
            ("AWS_ENDPOINT_URL", "endpoint_url"),
        ):
            if env.get(variable):
                options[option] = env[variable]
    try:
        fs, root = fsspec.core.url_to_fs(location, **options)
        key = f"{root.rstrip('/')}/.kubetrain-preflight-{uuid.uuid4().hex[:12]}"
        fs.pipe_file(key, b"")
        fs.rm_file(key)
    except FileNotFoundError as exc:
        return f"the bucket does not exist ({exc})"
    except OSError as exc:  # the store answered: access denied, unknown credentials, ...
        return str(exc)
    except Exception as exc:  # not reachable from here, or no client for the scheme: the pods will tell
        log.info("could not check checkpoint location %s from here: %s", location, exc)
    return None
