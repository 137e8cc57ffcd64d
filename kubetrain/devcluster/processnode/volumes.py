"""Pod volumes as host directories.

| volume | host directory |
|---|---|
| ``emptyDir`` | ``<state>/pods/<pod uid>/volumes/<name>``, removed with the pod |
| ``hostPath`` | the path itself (this is the host) |
| ``persistentVolumeClaim`` | the ``hostPath`` of the bound PersistentVolume (for claims of the ``kubetrain-local`` class: ``<cluster state>/volumes/<ns>/<claim>``, kept until the claim is deleted) |
| ``configMap``, ``secret`` | ``<state>/pods/<pod uid>/volumes/<name>``, one file per key (or per ``items`` entry) |
| ``projected`` | the same, from its ``configMap`` and ``secret`` sources and its ``serviceAccountToken``: a token from the TokenRequest API, bound to the pod, with the source's audience and expiry, as a kubelet gets it, and renewed as a kubelet renews it (``keep_tokens_fresh``: once 80% of its lifetime has passed, at most a day after it was issued) |

Claims are bound by the dev cluster's provisioner (``kubetrain.devcluster.provisioner``), a
component of its own; a pod's claim is mounted from the hostPath of the volume bound to it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import CONFIGMAPS, PVCS, PVS, SECRETS, SERVICE_ACCOUNTS

log = logging.getLogger(__name__)
Obj = dict[str, Any]

RENEW_AT = 0.8  # of a token's lifetime: when a kubelet renews a projected token
MAX_TOKEN_AGE = 24 * 3600  # seconds: a kubelet renews a longer-lived token after a day anyway
RENEW_RETRY_SECONDS = 10.0
DEFAULT_TOKEN_SECONDS = 3600


class VolumeError(RuntimeError):
    """A volume cannot be set up (yet); the message says which and why."""


async def prepare(kube: KubeClient, pod: Obj, pod_dir: Path) -> dict[str, Path]:
    """Host directory of every volume of ``pod``, created and filled as needed."""
    return {
        volume["name"]: await _prepare_one(kube, pod, volume, pod_dir / "volumes" / volume["name"])
        for volume in pod["spec"].get("volumes") or []
    }


async def _prepare_one(kube: KubeClient, pod: Obj, volume: Obj, local: Path) -> Path:
    namespace, name = pod["metadata"]["namespace"], volume["name"]
    if "hostPath" in volume:
        path = Path(volume["hostPath"]["path"])
        if volume["hostPath"].get("type") in ("DirectoryOrCreate", None, ""):
            path.mkdir(parents=True, exist_ok=True)
        return path
    if "persistentVolumeClaim" in volume:
        return await _claim_path(kube, namespace, volume["persistentVolumeClaim"]["claimName"])
    local.mkdir(parents=True, exist_ok=True)  # emptyDir, downwardAPI and the like: an empty directory
    if "configMap" in volume or "secret" in volume:
        await _write_source(kube, namespace, name, volume, local)
    for source in (volume.get("projected") or {}).get("sources") or []:
        if "serviceAccountToken" in source:
            token = await _token(kube, pod, source["serviceAccountToken"])
            _write(local / source["serviceAccountToken"]["path"], token.encode())
        elif "configMap" in source or "secret" in source:
            await _write_source(kube, namespace, name, source, local)
    return local


def renew_after(expiration_seconds: int) -> float:
    """Seconds after it was issued that a projected token is renewed: at 80% of its lifetime (so a
    process that reads its token file for each request never sends an expired one), at most a day."""
    return min(RENEW_AT * expiration_seconds, MAX_TOKEN_AGE)


def _token_sources(pod: Obj) -> list[tuple[str, Obj]]:
    """(volume name, ``serviceAccountToken`` source) of every projected token of ``pod``."""
    return [
        (volume["name"], source["serviceAccountToken"])
        for volume in pod["spec"].get("volumes") or []
        for source in (volume.get("projected") or {}).get("sources") or []
        if "serviceAccountToken" in source
    ]


async def keep_tokens_fresh(
    kube: KubeClient, pod: Obj, pod_dir: Path, *, after: Callable[[int], float] = renew_after
) -> None:
    """Renew every projected token ``prepare`` wrote, for as long as the pod runs (cancel to stop).

    A failed renewal is retried every few seconds and keeps the old file: the token may still have
    a fifth of its life to go, as with a kubelet that cannot reach the API server for a while.
    """
    await asyncio.gather(
        *(
            _renew(kube, pod, pod_dir / "volumes" / name, source, after)
            for name, source in _token_sources(pod)
        )
    )


async def _renew(kube: KubeClient, pod: Obj, local: Path, source: Obj, after: Callable[[int], float]) -> None:
    lifetime = int(source.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
    while True:
        await asyncio.sleep(after(lifetime))
        while True:
            try:
                token = await _token(kube, pod, source)
            except VolumeError as exc:
                log.warning("pod %s: %s; keeping the current token", pod["metadata"]["name"], exc)
                await asyncio.sleep(RENEW_RETRY_SECONDS)
                continue
            _write(local / source["path"], token.encode())
            break


def _write(path: Path, content: bytes) -> None:
    """Replace the file at once: a process reading it (a token, each request) sees the old or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(content)
    os.replace(partial, path)


async def _write_source(kube: KubeClient, namespace: str, volume: str, source: Obj, local: Path) -> None:
    """The keys of a ``configMap`` or ``secret`` source as files (only its ``items``, when it lists any)."""
    ref_source = source.get("configMap") or source.get("secret") or {}
    ref = ref_source.get("name") or ref_source.get("secretName")
    resource = CONFIGMAPS if "configMap" in source else SECRETS
    obj = await kube.get(resource, ref, namespace) if ref else None
    if obj is None and not ref_source.get("optional"):
        raise VolumeError(f"{resource.kind} {ref!r} of volume {volume!r} does not exist")
    data = (obj or {}).get("data") or {}
    items = ref_source.get("items")
    paths = {i["key"]: i["path"] for i in items} if items else {key: key for key in data}
    for key, path in paths.items():
        if key not in data:
            if ref_source.get("optional"):
                continue
            raise VolumeError(f"{resource.kind} {ref!r} of volume {volume!r} has no key {key!r}")
        value = data[key]
        _write(local / path, base64.b64decode(value) if resource is SECRETS else str(value).encode())


async def _token(kube: KubeClient, pod: Obj, source: Obj) -> str:
    """A ServiceAccount token for the pod, bound to it, through the TokenRequest API."""
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    spec: Obj = {
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        "expirationSeconds": int(source.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS),
    }
    if source.get("audience"):
        spec["audiences"] = [source["audience"]]
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = SERVICE_ACCOUNTS.path(meta["namespace"], account, "token")
    try:
        answer = await kube.request("POST", path, body=body, resource="serviceaccounts/token")
    except errors.APIError as exc:
        raise VolumeError(f"no token for service account {account!r}: {exc}") from exc
    return str(answer["status"]["token"])


async def _claim_path(kube: KubeClient, namespace: str, claim: str) -> Path:
    pvc = await kube.get(PVCS, claim, namespace)
    if pvc is None:
        raise VolumeError(f"PersistentVolumeClaim {namespace}/{claim} does not exist")
    volume_name = (pvc.get("spec") or {}).get("volumeName")
    if not volume_name or (pvc.get("status") or {}).get("phase") != "Bound":
        raise VolumeError(f"PersistentVolumeClaim {namespace}/{claim} is not bound yet")
    pv = await kube.get(PVS, volume_name)
    host_path = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
    if not host_path:
        raise VolumeError(f"PersistentVolume {volume_name} of claim {claim} is not a host directory")
    path = Path(host_path)
    path.mkdir(parents=True, exist_ok=True)
    return path
