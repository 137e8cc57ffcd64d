"""``AsyncJobClient``: submit, track, wait for, read the logs of, and resubmit training jobs.

The one client the CLI, the Airflow operators, sensors and triggers, and the
KFP components share. It talks to the job CRDs directly (no Kubeflow SDK, whose
``kubernetes`` pins conflict with Airflow's), on ``kubernetes_asyncio``.

Transient API errors (429 with ``Retry-After``, 5xx, dropped connections) are
retried with tenacity; a watch that drops is re-established, and re-listed
after a 410. A job that fails raises ``JobFailedError`` with its reason and the
last lines of rank 0's log, so whoever waits sees why without digging.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import json
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
import pydantic
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client import ApiException
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from kubetrain import naming, plot
from kubetrain.api import v1, v2
from kubetrain.api.base import ApiModel
from kubetrain.api.kinds import JobKind
from kubetrain.client import kinds, lineage
from kubetrain.client.errors import (
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
)
from kubetrain.client.preflight import check_checkpoint_location
from kubetrain.kube.client import close_api, settle_environment

Obj = dict[str, Any]
T = TypeVar("T")
LOG_TAIL = 30

MODELS: dict[str, type[ApiModel]] = {
    **{m.api_kind.kind: m for m in v1.V1_KINDS},
    v2.TrainJob.api_kind.kind: v2.TrainJob,
}


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in (0, 429) or exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError)


def _retry_after(state: Any) -> float:
    exc = state.outcome.exception() if state.outcome else None
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value and str(value).isdigit():
        return float(value)
    return float(wait_exponential(multiplier=0.2, max=10)(state))


async def retrying(call: Callable[[], Awaitable[T]], attempts: int = 6) -> T:
    """Run ``call`` again on transient API errors, honouring ``Retry-After``."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_transient),
        wait=_retry_after,
        stop=stop_after_attempt(attempts),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def _log_stream(
    core: client.CoreV1Api, name: str, namespace: str, **query: Any
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The raw response for a container's log, raising ApiException for an error status as a read would.

    Logs are read raw because the generated client parses a body as JSON before it looks at the declared
    type: a log that happens to be JSON (one line ``null``, ``42`` or ``{"loss": 1}``) would come back as
    None, an int or a dict. A raw response skips the client's status check, so it is made here.
    """
    raw: Any = await core.read_namespaced_pod_log(name, namespace, _preload_content=False, **query)
    response: aiohttp.ClientResponse = raw
    async with response:
        if not 200 <= response.status <= 299:
            error = ApiException(status=response.status, reason=response.reason)
            text: Any = await response.text(errors="replace")  # a str, as the client's own errors carry
            error.body = text
            raise error
        yield response


async def pod_log(core: client.CoreV1Api, name: str, namespace: str, **query: Any) -> str:
    """A container's log as the text it is."""
    async with _log_stream(core, name, namespace, **query) as response:
        body: bytes = await response.read()
    return body.decode(errors="replace")


def validate(manifest: Obj) -> None:
    """Check a manifest against the kind's model before it reaches the cluster; names every bad field."""
    kind = manifest.get("kind")
    if kind not in MODELS:
        raise InvalidJobError(f"kind must be one of {', '.join(MODELS)} (got {kind!r})")
    if not (manifest.get("metadata") or {}).get("name"):
        raise InvalidJobError("metadata.name is required")
    try:
        MODELS[kind].model_validate(manifest)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InvalidJobError(f"invalid {kind} {manifest['metadata']['name']}: {problems}") from None


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)


class AsyncJobClient:
    def __init__(self, api: client.ApiClient, *, owns_api: bool = False) -> None:
        self.api = api
        # The generated API classes type bodies as models and every keyword as required; this client
        # passes plain dicts and leaves optional arguments out, so they are used untyped.
        self.custom: Any = client.CustomObjectsApi(api)
        self.core: Any = client.CoreV1Api(api)
        self._owns_api = owns_api
        self._dynamic: Any = None  # a discovery-backed client for other kinds, made on first use
        self._env_session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        config_dict: Obj | None = None,
        in_cluster: bool | None = None,
    ) -> AsyncJobClient:
        """In-cluster credentials, a kubeconfig dict or file, or the default kubeconfig."""
        if in_cluster or (
            in_cluster is None and kubeconfig is None and config_dict is None and _in_cluster()
        ):
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api = client.ApiClient(client.Configuration.get_default_copy())
        elif config_dict is not None:
            api = await config.new_client_from_config_dict(config_dict, context=context)
        else:
            # $KUBECONFIG as it is now: the library reads it once, when it is first imported.
            kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
            api = await config.new_client_from_config(config_file=kubeconfig, context=context)
        job_client = cls(api, owns_api=True)
        job_client._env_session = settle_environment(api)  # a poll is a request: see kubetrain.kube.client
        return job_client

    async def close(self) -> None:
        if self._owns_api:
            await close_api(self.api, self._env_session)

    async def __aenter__(self) -> AsyncJobClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- jobs ------------------------------------------------------------------------------------
    async def create(
        self, manifest: Obj | ApiModel, *, namespace: str | None = None, dry_run: bool = False
    ) -> Obj:
        """Validate and submit a job; returns it as stored. ``dry_run`` asks the API server to check only."""
        body = manifest.to_dict() if isinstance(manifest, ApiModel) else copy.deepcopy(manifest)
        validate(body)
        namespace = namespace or body["metadata"].get("namespace") or "default"
        body["metadata"]["namespace"] = namespace
        kind = kinds.kind_of(body["kind"])
        await check_checkpoint_location(self.core, body, namespace)
        extra = {"dry_run": "All"} if dry_run else {}
        try:
            created: Obj = await retrying(
                lambda: self.custom.create_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, body, **extra
                )
            )
        except ApiException as exc:
            if exc.status == 422:
                raise InvalidJobError(
                    f"the API server rejected {kind.kind} {body['metadata']['name']}: {_api_message(exc)}"
                ) from None
            if exc.status == 409:
                raise JobExistsError(
                    f"{kind.kind} {namespace}/{body['metadata']['name']} already exists"
                ) from None
            if exc.status == 404:
                raise InvalidJobError(
                    f"{kind.kind} is not installed in this cluster (no CRD "
                    f"{kind.plural}.{kind.group}); install deploy/crds"
                ) from None
            raise
        return created

    async def create_supporting(self, manifest: Obj, *, namespace: str, dry_run: bool = False) -> str:
        """Create an object a job needs (a claim, a ConfigMap, a runtime...) unless it exists; returns
        ``created`` or ``unchanged``. Objects of any installed kind, found through API discovery."""
        from kubernetes_asyncio.dynamic import DynamicClient
        from kubernetes_asyncio.dynamic.exceptions import ResourceNotFoundError

        body = copy.deepcopy(manifest)
        what = f"{body.get('kind')} {body.get('metadata', {}).get('name')}"
        if self._dynamic is None:
            self._dynamic = await DynamicClient(self.api)  # discovers the cluster's kinds, once
        dynamic = self._dynamic
        try:
            resource = await dynamic.resources.get(api_version=body.get("apiVersion"), kind=body.get("kind"))
        except ResourceNotFoundError:
            raise InvalidJobError(
                f"{what}: the cluster has no kind {body.get('kind')} in {body.get('apiVersion')}"
            ) from None
        extra = {"dry_run": "All"} if dry_run else {}
        if resource.namespaced:
            body["metadata"]["namespace"] = namespace
            extra["namespace"] = namespace
        created = await retrying(lambda: dynamic.create(resource, body=body, **extra))
        # The dynamic client hands failures back as a Status object rather than raising them.
        status = created.to_dict() if hasattr(created, "to_dict") else {}
        if status.get("kind") != "Status" or status.get("status") != "Failure":
            return "created"
        if status.get("code") == 409:
            return "unchanged"
        if status.get("code") in (400, 422):
            raise InvalidJobError(f"the API server rejected {what}: {status.get('message')}")
        raise ApiException(status=status.get("code"), reason=status.get("message"))

    async def get(self, kind: str, name: str, namespace: str) -> Obj | None:
        spec = kinds.kind_of(kind)
        try:
            job: Obj = await retrying(
                lambda: self.custom.get_namespaced_custom_object(
                    spec.group, spec.version, namespace, spec.plural, name
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return job

    async def require(self, kind: str, name: str, namespace: str) -> Obj:
        job = await self.get(kind, name, namespace)
        if job is None:
            raise JobNotFoundError(f"{kind} {namespace}/{name} not found")
        return job

    async def list(
        self, *, kind: str | None = None, namespace: str | None = None, label_selector: str | None = None
    ) -> builtins.list[Obj]:
        """Jobs of one kind, or of every installed kind."""
        wanted = [kinds.kind_of(kind)] if kind else list(kinds.KINDS.values())
        found: builtins.list[Obj] = []
        for spec in wanted:
            try:
                if namespace:
                    listed = await retrying(
                        lambda s=spec: self.custom.list_namespaced_custom_object(  # type: ignore[misc]
                            s.group, s.version, namespace, s.plural, label_selector=label_selector
                        )
                    )
                else:
                    listed = await retrying(
                        lambda s=spec: self.custom.list_cluster_custom_object(  # type: ignore[misc]
                            s.group, s.version, s.plural, label_selector=label_selector
                        )
                    )
            except ApiException as exc:
                if exc.status == 404 and kind is None:
                    continue  # that kind is not installed
                raise
            for item in listed.get("items") or []:
                item.setdefault("kind", spec.kind)
                item.setdefault("apiVersion", spec.api_version)
                found.append(item)
        return found

    async def delete(self, kind: str, name: str, namespace: str, *, propagation: str = "Foreground") -> bool:
        """Delete a job and (through owner references) its pods; False when it was already gone."""
        spec = kinds.kind_of(kind)
        try:
            await retrying(
                lambda: self.custom.delete_namespaced_custom_object(
                    spec.group,
                    spec.version,
                    namespace,
                    spec.plural,
                    name,
                    body={"propagationPolicy": propagation},
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def set_suspended(self, kind: str, name: str, namespace: str, suspended: bool) -> Obj:
        """Suspend a job (its pods are deleted, it keeps its place) or let it run again."""
        suspend = {"suspend": suspended}
        patch = {"spec": {"runPolicy": suspend}} if kinds.kind_of(kind).is_v1 else {"spec": suspend}
        return await self._merge_patch(kind, name, namespace, patch)

    async def annotate(self, kind: str, name: str, namespace: str, annotations: dict[str, str]) -> Obj:
        """Set annotations on a job (a merge patch of its metadata only)."""
        return await self._merge_patch(kind, name, namespace, {"metadata": {"annotations": annotations}})

    async def _merge_patch(self, kind: str, name: str, namespace: str, patch: Obj) -> Obj:
        """Merge ``patch`` into the job; a job that is not there is a ``JobNotFoundError``."""
        spec = kinds.kind_of(kind)
        try:
            job: Obj = await retrying(
                lambda: self.custom.patch_namespaced_custom_object(
                    spec.group,
                    spec.version,
                    namespace,
                    spec.plural,
                    name,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                raise JobNotFoundError(f"{kind} {namespace}/{name} not found") from None
            raise
        return job

    async def resubmit(
        self,
        job: Obj,
        *,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Submit the next attempt of a job: same spec, checkpoint dir and volume, lineage; attempt + 1.

        The new attempt resumes from the last checkpoint the old one reported (``kubetrain.dev/last-checkpoint``),
        or from the latest in the shared checkpoint directory. This submits unconditionally; callers that
        must not race an earlier attempt's pods use ``prepare_attempt`` (``kubetrain.client.lineage``).
        """
        return await self.create(lineage.successor(job, name=name, labels=labels), dry_run=dry_run)

    async def prepare_attempt(
        self,
        request: lineage.Request,
        *,
        log: Callable[[str], None] = print,
        pod_wait: float = lineage.POD_WAIT_SECONDS,
        include: Sequence[Obj] = (),
    ) -> lineage.Prepared:
        """Reattach to, resume, or submit the attempt of ``request``'s lineage that should run now."""
        return await lineage.prepare(self, request, log=log, pod_wait=pod_wait, include=include)

    # -- watching and waiting --------------------------------------------------------------------
    async def watch(
        self, kind: str, name: str, namespace: str, *, timeout: float | None = None
    ) -> AsyncIterator[Obj]:
        """Yield the job each time it changes (first as it is now); survives dropped watches."""
        spec = kinds.kind_of(kind)
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        selector = f"metadata.name={name}"
        version = ""
        last_seen = ""
        while True:
            if not version:
                version, current = await self._list_one(spec, name, namespace)
                last_seen = current["metadata"]["resourceVersion"]
                yield current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            stream = watch.Watch()
            try:
                async with stream.stream(
                    self.custom.list_namespaced_custom_object,
                    spec.group,
                    spec.version,
                    namespace,
                    spec.plural,
                    field_selector=selector,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=int(min(remaining, 300)) or 1,
                ) as events:
                    async for event in events:
                        obj = event["object"]
                        if event["type"] == "DELETED":
                            raise JobNotFoundError(f"{spec.kind} {namespace}/{name} was deleted")
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED") and version != last_seen:
                            last_seen = version
                            obj.setdefault("kind", spec.kind)
                            yield obj
            except (ApiException, TimeoutError, aiohttp.ClientError) as exc:  # the watch broke
                if isinstance(exc, ApiException) and exc.status == 410:
                    version = ""  # too old: list again
                    continue
                if isinstance(exc, ApiException) and not _transient(exc):
                    raise
                await asyncio.sleep(1)

    async def _list_one(self, spec: JobKind, name: str, namespace: str) -> tuple[str, Obj]:
        """The list's resourceVersion (to watch from) and the job as it is now."""
        listed = await retrying(
            lambda: self.custom.list_namespaced_custom_object(
                spec.group, spec.version, namespace, spec.plural, field_selector=f"metadata.name={name}"
            )
        )
        items = listed.get("items") or []
        if not items:
            raise JobNotFoundError(f"{spec.kind} {namespace}/{name} not found")
        current: Obj = items[0]
        current.setdefault("kind", spec.kind)
        return listed["metadata"]["resourceVersion"], current

    async def wait(
        self,
        kind: str,
        name: str,
        namespace: str,
        *,
        timeout: float | None = None,
        on_change: Callable[[Obj], Awaitable[None] | None] | None = None,
    ) -> Obj:
        """Wait for the job to finish; return it when it succeeded, raise ``JobFailedError`` when it failed."""
        latest: Obj | None = None
        async for job in self.watch(kind, name, namespace, timeout=timeout):
            latest = job
            if on_change is not None:
                result = on_change(job)
                if asyncio.iscoroutine(result):
                    await result
            if kinds.is_finished(job):
                return await self.check(job)
        current = kinds.state(latest) if latest else "unknown"
        raise JobTimeoutError(
            f"{kind} {namespace}/{name} did not finish within {timeout:.0f}s (it is {current})"
            + await self._pending_hint(latest)
        )

    async def check(self, job: Obj) -> Obj:
        """Return a finished job that succeeded; raise ``JobFailedError`` (with rank 0's log tail) otherwise."""
        if kinds.state(job) == "Failed":
            reason, message = kinds.failure(job)
            whose, logs = await self.failure_logs(job)
            raise JobFailedError(job["metadata"]["name"], reason, message, logs, whose)
        return job

    async def failure_logs(self, job: Obj) -> tuple[str, str]:
        """``(whose, lines)`` of a failed job: the replica that failed first's, else rank 0's log tail."""
        first = kinds.first_failure_log(job)
        if first is not None:
            return first
        return "rank 0", await self.logs(job, tail=LOG_TAIL, quiet=True)

    async def _pending_hint(self, job: Obj | None) -> str:
        if job is None:
            return ""
        reasons = await self.pending_reasons(job)
        return ("; pods waiting: " + "; ".join(reasons)) if reasons else ""

    # -- pods, logs, events ----------------------------------------------------------------------
    async def pods(self, job: Obj) -> builtins.list[Any]:
        """Every pod of the job (owned by it)."""
        uid = job["metadata"].get("uid")
        listed = await retrying(lambda: self.core.list_namespaced_pod(job["metadata"]["namespace"]))
        return [p for p in listed.items if any(r.uid == uid for r in p.metadata.owner_references or [])]

    async def disruption(self, namespace: str, pod: str) -> str | None:
        """``kinds.disruption`` of pod ``pod``; None also when it cannot be read."""
        try:
            found = await retrying(lambda: self.core.read_namespaced_pod(pod, namespace))
        except ApiException:
            return None
        return kinds.disruption(self.api.sanitize_for_serialization(found))

    async def pods_matching(self, namespace: str, label_selector: str) -> builtins.list[Any]:
        """Pods of a namespace that match a label selector."""
        listed = await retrying(
            lambda: self.core.list_namespaced_pod(namespace, label_selector=label_selector)
        )
        return list(listed.items)

    async def pending_reasons(self, job: Obj) -> builtins.list[str]:
        """Why the job's pods are not scheduled (e.g. not enough GPUs), from their conditions."""
        reasons = []
        for pod in await self.pods(job):
            if pod.status.phase != "Pending":
                continue
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False":
                    reasons.append(f"{pod.metadata.name}: {condition.reason}: {condition.message}")
        return reasons

    async def admission_wait(self, job: Obj) -> str | None:
        """Why Kueue has not admitted the job yet, from its Workload; None when Kueue does not hold it,
        or when Workloads cannot be read (no Kueue, or no right to read them): the line is a courtesy."""
        if kinds.queued_line(job) is None:
            return None
        selector = f"{naming.LABEL_KUEUE_JOB_UID}={job['metadata'].get('uid')}"
        for version in naming.KUEUE_VERSIONS:
            try:
                listed = await self.custom.list_namespaced_custom_object(
                    naming.KUEUE_GROUP,
                    version,
                    job["metadata"]["namespace"],
                    "workloads",
                    label_selector=selector,
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue  # this version is not served
                return None
            except (TimeoutError, aiohttp.ClientError):
                return None
            workload = next(iter(listed.get("items") or []), None)
            if workload is None or kinds.admission_wait(workload) is None:
                return None
            return kinds.admission_wait(workload, await self._queue_position(job, workload))
        return None

    async def _queue_position(self, job: Obj, workload: Obj) -> int | None:
        """The Workload's place in its LocalQueue from Kueue's visibility API; None where that API is not
        served (it is an aggregated API a cluster may leave off) or cannot be read."""
        queue, namespace = kinds.queue_of(job), job["metadata"]["namespace"]
        for version in naming.KUEUE_VERSIONS:
            path = (
                f"/apis/{naming.KUEUE_VISIBILITY_GROUP}/{version}/namespaces/{namespace}"
                f"/localqueues/{queue}/pendingworkloads"
            )
            try:
                raw: Any = await self.api.call_api(
                    path, "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=10
                )
                response: aiohttp.ClientResponse = raw
                async with response:
                    if response.status == 404:
                        continue  # this version (or the whole API) is not served
                    if response.status != 200:
                        return None
                    pending = await response.json(content_type=None)
            except (TimeoutError, aiohttp.ClientError, ValueError):
                return None
            return kinds.queue_position(pending, workload["metadata"]["name"])
        return None

    async def _pod_for(self, job: Obj, role: str | None, index: int) -> client.V1Pod | None:
        selector = kinds.rank0_selector(job, role=role, index=index)
        listed = await retrying(
            lambda: self.core.list_namespaced_pod(job["metadata"]["namespace"], label_selector=selector)
        )
        live = [p for p in listed.items if not p.metadata.deletion_timestamp] or listed.items
        return live[0] if live else None

    def _log_stream(
        self, job: Obj, pod: client.V1Pod, container: str | None, **query: Any
    ) -> contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """The log of ``container`` (by default the job's training container) of one of ``job``'s pods."""
        return _log_stream(
            self.core,
            pod.metadata.name,
            job["metadata"]["namespace"],
            container=container or kinds.default_container(job),
            **query,
        )

    async def logs(
        self,
        job: Obj,
        *,
        role: str | None = None,
        index: int = 0,
        container: str | None = None,
        tail: int | None = None,
        previous: bool = False,
        quiet: bool = False,
    ) -> str:
        """The log of rank 0 (or of ``role``/``index``); with ``quiet``, '' instead of errors."""
        try:
            pod = await self._pod_for(job, role, index)
            if pod is None:
                if quiet:
                    return ""
                raise JobNotFoundError(f"no pod for {role or 'rank 0'} {index} of {job['metadata']['name']}")
            return await pod_log(
                self.core,
                pod.metadata.name,
                job["metadata"]["namespace"],
                container=container or kinds.default_container(job),
                tail_lines=tail,
                previous=previous,
            )
        except ApiException:
            if quiet:
                return ""
            raise

    async def curves(self, job: Obj) -> tuple[str, builtins.list[plot.Curve]]:
        """The lineage's name and the metric curves of each of its attempts, oldest first, from rank 0's
        log (its container's previous run, then the current one): what ``kubetrain plot`` draws."""
        kind, namespace = job["kind"], job["metadata"]["namespace"]
        name = lineage.lineage_of(job)
        labelled = await self.list(
            kind=kind, namespace=namespace, label_selector=f"{naming.LABEL_LINEAGE}={name}"
        )
        first = await self.get(kind, name, namespace)  # a first attempt made without the label names it
        by_uid = {j["metadata"]["uid"]: j for j in [*labelled, job, *([first] if first else [])]}
        curves = [
            plot.Curve(
                attempt["metadata"]["name"],
                kinds.state(attempt) == "Failed",
                plot.merged(
                    plot.parse(await self.logs(attempt, previous=True, quiet=True)),
                    plot.parse(await self.logs(attempt, quiet=True)),
                ),
            )
            for attempt in sorted(by_uid.values(), key=lineage.attempt_of)
        ]
        return name, curves

    async def follow_logs(
        self, job: Obj, *, role: str | None = None, index: int = 0, container: str | None = None
    ) -> AsyncIterator[str]:
        """Lines of rank 0's log as they are written, across its container's restarts, until the job ends."""
        seen_pods: dict[str, int] = {}
        while True:
            pod = await self._pod_for(job, role, index)
            current = await self.get(job["kind"], job["metadata"]["name"], job["metadata"]["namespace"])
            if current is None:
                return
            if pod is None or pod.status.phase == "Pending":
                if kinds.is_finished(current):
                    return
                await asyncio.sleep(1)
                continue
            key = f"{pod.metadata.uid}/{_restarts(pod)}"
            skip = seen_pods.get(key, 0)
            count = 0
            with contextlib.suppress(ApiException, aiohttp.ClientError, asyncio.TimeoutError):
                async with self._log_stream(job, pod, container, follow=True) as response:
                    async for raw in response.content:
                        count += 1
                        if count > skip:
                            yield raw.decode(errors="replace").rstrip("\n")
            seen_pods[key] = max(skip, count)
            if kinds.is_finished(current) or pod.status.phase in ("Succeeded", "Failed"):
                refreshed = await self.get(job["kind"], job["metadata"]["name"], job["metadata"]["namespace"])
                if refreshed is None or kinds.is_finished(refreshed):
                    return
            await asyncio.sleep(1)

    async def events(self, job: Obj) -> builtins.list[Any]:
        """Events about the job, oldest first."""
        listed = await retrying(
            lambda: self.core.list_namespaced_event(
                job["metadata"]["namespace"], field_selector=f"involvedObject.name={job['metadata']['name']}"
            )
        )
        return sorted(
            listed.items, key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp
        )

    report = staticmethod(kinds.report)


def _restarts(pod: client.V1Pod) -> int:
    return sum(s.restart_count or 0 for s in pod.status.container_statuses or [])


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )
