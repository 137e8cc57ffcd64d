"""The deferrable wait: a trigger that watches a training job's conditions.

A triggerer may hold hundreds of deferred training tasks. Each trigger does not
open a watch of its own: triggers of one connection, namespace and kind share
one list+watch (``SharedJobWatch``), which keeps the latest copy of every job
and wakes the triggers whose job changed. So a hundred deferred tasks cost one
watch, not a hundred polls.

The shared watch never leaves a trigger waiting on something it can no longer
see. When the API server has compacted the history a watch resumes from (410
Gone), the watch lists again, and a job missing from that list was deleted
while nobody was watching: its triggers are told, as they are for a DELETED
event. A list the API server refuses for good (forbidden, the kind not
installed) fails the triggers with the API server's message; the first list
must succeed within ``SharedJobWatch.first_list_deadline`` seconds.

What a trigger stores. Airflow writes a trigger's kwargs and its event into the
metadata database (and logs them). The kwargs name the cluster by connection id
or kubeconfig path, never by the credentials: the triggerer reads the
connection itself. The event carries the job's identity and status, not its
spec, whose ``env`` may hold tokens.

The trigger yields exactly one event: ``success``, ``failed`` (with the reason
and rank 0's log tail), ``timeout`` (the task's ``execution_timeout`` passed),
or ``error``. On Airflow 3.3+, ``on_kill`` runs when a user marks the deferred
task failed or clears it, and deletes or suspends the job as the operator says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from asgiref.sync import sync_to_async
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiException

from kubetrain import naming
from kubetrain.client import AsyncJobClient, kinds
from kubetrain.operators.compat import BaseTrigger, TriggerEvent
from kubetrain.operators.hooks import ClusterConnection, KubetrainHook

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LOG_TAIL = 30
LIST_TIMEOUT = 60.0  # seconds a list may take once the watch has synced (the first has its deadline)
WATCH_SECONDS = 300  # the server-side length of one watch request

# Client errors that the same request meets again: retrying cannot help (410 and 429 are not among them).
_PERMANENT = frozenset({400, 401, 403, 404, 405, 406, 415, 422})


# -- pure decisions ------------------------------------------------------------------------------------
def is_permanent(exc: BaseException) -> bool:
    """Whether a failed list or watch will fail the same way when tried again."""
    return isinstance(exc, ApiException) and exc.status in _PERMANENT


def api_message(exc: BaseException) -> str:
    """The API server's own words for a failed request: its Status message, with the HTTP code."""
    if isinstance(exc, TimeoutError):
        return "no answer in time (the request timed out)"
    if not isinstance(exc, ApiException):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    message = str(exc.reason or "")
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        message = str(json.loads(exc.body or "{}").get("message") or message)
    return f"{message} (HTTP {exc.status})" if exc.status else message


def vanished(known: Iterable[str], listed: Iterable[str]) -> list[str]:
    """The jobs a fresh list no longer holds: deleted while the watch was away."""
    present = set(listed)
    return sorted(name for name in known if name not in present)


def retry_delay(failures: int) -> float:
    """Seconds to wait after ``failures`` failed attempts in a row: 1, 2, 4 ... at most 30."""
    return float(min(30, 2 ** max(0, failures - 1)))


def event_job(job: Obj) -> Obj:
    """What an event carries of a job: its identity, kubetrain's annotations and its status.

    Never the spec (its ``env`` may hold tokens) nor other annotations (``last-applied-configuration``
    is a copy of the spec); the operator's ``execute_complete`` needs no more than this."""
    meta = job.get("metadata") or {}

    def ours(values: dict[str, str] | None) -> dict[str, str]:
        return {k: v for k, v in (values or {}).items() if k.startswith(f"{naming.PREFIX}/")}

    return {
        "apiVersion": job.get("apiVersion"),
        "kind": job.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "labels": ours(meta.get("labels")),
            "annotations": ours(meta.get("annotations")),
        },
        "status": job.get("status") or {},
    }


# -- where the cluster is -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConnectionRef:
    """How the triggerer finds the cluster: a connection id or a kubeconfig path, not credentials.

    With a connection id, the connection is read in the triggerer (through the cncf.kubernetes hook, as
    the worker reads it); without one, ``config_file`` (else the default kubeconfig) or in-cluster."""

    kubernetes_conn_id: str | None = None
    config_file: str | None = None
    cluster_context: str | None = None
    in_cluster: bool = False

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def resolve_now(self) -> ClusterConnection:
        if self.kubernetes_conn_id:
            hook = KubetrainHook(
                conn_id=self.kubernetes_conn_id,
                config_file=self.config_file,
                cluster_context=self.cluster_context,
                in_cluster=True if self.in_cluster else None,
            )
            return hook.cluster_connection()
        if self.in_cluster:
            return ClusterConnection(in_cluster=True)
        return ClusterConnection(config_file=self.config_file, context=self.cluster_context)

    async def resolve(self) -> ClusterConnection:
        # Reading a connection is synchronous (secrets backends, the metadata DB or, on Airflow 3, the
        # supervisor): run it beside the event loop, as Airflow's own async hooks do.
        return await sync_to_async(self.resolve_now)()


class WatchFailedError(Exception):
    """The shared watch cannot go on: a permanent API error, or no first list before the deadline."""


# -- the shared watch -----------------------------------------------------------------------------------
class SharedJobWatch:
    """One list+watch of one kind in one namespace, shared by every trigger waiting there."""

    _instances: ClassVar[dict[tuple[str, str, str], SharedJobWatch]] = {}
    first_list_deadline: ClassVar[float] = 120.0  # seconds for the first list to succeed

    def __init__(
        self,
        ref: ConnectionRef,
        namespace: str,
        kind: str,
        *,
        resolved: ClusterConnection | None = None,
    ) -> None:
        self.ref = ref
        self.namespace = namespace
        self.kind = kinds.kind_of(kind)
        self.jobs: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.error: str | None = None
        self.client: AsyncJobClient | None = None
        self._settled = asyncio.Event()  # synced, or failed for good
        self._changed: dict[str, asyncio.Event] = {}
        self._users = 0
        self._task: asyncio.Task[None] | None = None
        self._resolved = resolved
        self.key = self.key_of(ref, namespace, kind, resolved)

    @staticmethod
    def key_of(
        ref: ConnectionRef, namespace: str, kind: str, resolved: ClusterConnection | None
    ) -> tuple[str, str, str]:
        """Triggers share a watch when they name the same cluster the same way, namespace and kind."""
        cluster = resolved.key() if resolved is not None else ref.key()
        return (cluster, namespace, kinds.kind_of(kind).kind)

    @classmethod
    def acquire(
        cls,
        ref: ConnectionRef,
        namespace: str,
        kind: str,
        *,
        resolved: ClusterConnection | None = None,
    ) -> SharedJobWatch:
        key = cls.key_of(ref, namespace, kind, resolved)
        shared = cls._instances.get(key)
        if shared is None:
            shared = cls._instances[key] = SharedJobWatch(ref, namespace, kind, resolved=resolved)
        shared._users += 1
        if shared._task is None or shared._task.done():
            shared._task = asyncio.get_running_loop().create_task(shared._run())
        return shared

    async def release(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        if self._instances.get(self.key) is self:
            del self._instances[self.key]
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.client is not None:
            await self.client.close()
            self.client = None

    def changed(self, name: str) -> asyncio.Event:
        return self._changed.setdefault(name, asyncio.Event())

    def _store(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        obj.setdefault("kind", self.kind.kind)
        self.jobs[name] = obj
        self.changed(name).set()

    def _forget(self, name: str) -> None:
        self.jobs.pop(name, None)
        self.changed(name).set()

    def _replace_all(self, items: list[Obj]) -> None:
        """A fresh list: what it lacks was deleted meanwhile, and its waiters are told."""
        for name in vanished(self.jobs, (item["metadata"]["name"] for item in items)):
            self._forget(name)
        for item in items:
            self._store(item)

    def _fail(self, message: str) -> None:
        """Stop for good: every waiter wakes up to the error; later triggers start a fresh watch."""
        self.error = message
        if self._instances.get(self.key) is self:
            del self._instances[self.key]
        self._settled.set()
        for event in self._changed.values():
            event.set()

    async def _run(self) -> None:
        started = time.monotonic()
        what = f"{self.kind.plural} in namespace {self.namespace}"
        try:
            connection = self._resolved or await self.ref.resolve()
            self.client = await connection.aclient()
        except Exception as exc:
            self._fail(f"cannot reach the cluster to watch {what}: {api_message(exc)}")
            return
        custom = self.client.custom
        version = ""
        failures = 0
        gone = 0  # 410s in a row: the first lists again at once, more wait as failures do
        while True:
            try:
                if not version:
                    # A list that hangs (a half-open connection, a stuck API server) must end too:
                    # the first one within what is left of its deadline, later ones within a minute.
                    left = self.first_list_deadline - (time.monotonic() - started)
                    listed = await custom.list_namespaced_custom_object(
                        self.kind.group,
                        self.kind.version,
                        self.namespace,
                        self.kind.plural,
                        _request_timeout=max(left, 1.0) if not self.synced.is_set() else LIST_TIMEOUT,
                    )
                    self._replace_all(list(listed.get("items") or []))
                    version = listed["metadata"]["resourceVersion"]
                    self.synced.set()
                    self._settled.set()
                    failures = 0
                stream = watch.Watch()
                async with stream.stream(
                    custom.list_namespaced_custom_object,
                    self.kind.group,
                    self.kind.version,
                    self.namespace,
                    self.kind.plural,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS,
                    # The API server ends the watch after WATCH_SECONDS; one silent past that hangs.
                    _request_timeout=WATCH_SECONDS + 30,
                ) as events:
                    async for event in events:
                        failures = gone = 0
                        version = event["object"].get("metadata", {}).get("resourceVersion", version)
                        self._apply(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, ApiException) and exc.status == 410:
                    version = ""  # the history is gone: list again, and drop what the list lacks
                    gone += 1
                    if gone > 1:
                        await asyncio.sleep(retry_delay(gone - 1))
                    continue
                failures += 1
                reason = self._reason_to_stop(exc, what, failures, started)
                if reason is not None:
                    self._fail(reason)
                    return
                log.warning("watch of %s failed (%s); trying again", what, api_message(exc))
                await asyncio.sleep(retry_delay(failures))

    def _apply(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        if event["type"] == "DELETED":
            self._forget(obj["metadata"]["name"])
        elif event["type"] in ("ADDED", "MODIFIED"):
            self._store(obj)

    def _reason_to_stop(self, exc: Exception, what: str, failures: int, started: float) -> str | None:
        """Why the watch stops for good after its ``failures``-th failure, ``exc`` (None: it tries again):
        the API server refuses for good, or the first list would end past its deadline."""
        if is_permanent(exc):
            return f"the API server refused to list or watch {what}: {api_message(exc)}"
        waited = time.monotonic() - started
        if not self.synced.is_set() and waited + retry_delay(failures) > self.first_list_deadline:
            return f"could not list {what} within {self.first_list_deadline:.0f}s: {api_message(exc)}"
        return None

    async def updates(self, name: str, *, interval: float) -> AsyncIterator[Obj | None]:
        """The job each time it changes, and at least every ``interval`` seconds (None once it is gone).

        Raises ``WatchFailedError`` when the watch stops for good."""
        await self._settled.wait()
        while True:
            if self.error is not None:
                raise WatchFailedError(self.error)
            event = self.changed(name)
            event.clear()
            yield self.jobs.get(name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), interval)


status_line = kinds.status_line  # one line for a task log: what the job is doing


# -- the trigger ----------------------------------------------------------------------------------------
class JobTrigger(BaseTrigger):
    """Wait for a training job to finish, over a watch shared by every trigger of that namespace.

    The cluster is named by ``kubernetes_conn_id`` (read in the triggerer), else by ``config_file`` /
    ``cluster_context`` or ``in_cluster``. ``uid``, when given, is the job waited for: a job of the same
    name but another uid means it was deleted and replaced. ``connection`` is what triggers deferred by
    earlier versions carried (read, and written back only when it held an inline kubeconfig).
    """

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        namespace: str,
        kubernetes_conn_id: str | None = None,
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool = False,
        uid: str | None = None,
        deadline: float | None = None,
        status_interval: float = 60.0,
        on_kill_action: str = "delete",
        get_logs: bool = True,
        connection: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow 2 and 3 leave it untyped
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self._legacy: dict[str, Any] | None = None
        if connection is not None:
            config_file = config_file or connection.get("config_file")
            cluster_context = cluster_context or connection.get("context")
            in_cluster = in_cluster or bool(connection.get("in_cluster"))
            if connection.get("config_dict"):
                self._legacy = dict(connection)
        self.ref = ConnectionRef(kubernetes_conn_id, config_file, cluster_context, in_cluster)
        self.uid = uid or None
        self.deadline = deadline
        self.status_interval = status_interval
        self.on_kill_action = on_kill_action
        self.get_logs = get_logs

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "kubernetes_conn_id": self.ref.kubernetes_conn_id,
            "config_file": self.ref.config_file,
            "cluster_context": self.ref.cluster_context,
            "in_cluster": self.ref.in_cluster,
            "uid": self.uid,
            "deadline": self.deadline,
            "status_interval": self.status_interval,
            "on_kill_action": self.on_kill_action,
            "get_logs": self.get_logs,
        }
        if self._legacy is not None:
            kwargs["connection"] = self._legacy
        return ("kubetrain.operators.triggers.JobTrigger", kwargs)

    def _legacy_connection(self) -> ClusterConnection | None:
        return ClusterConnection.from_dict(self._legacy) if self._legacy is not None else None

    def _event(self, status: str, job: Obj | None = None, **extra: Any) -> Obj:
        event: Obj = {
            "status": status,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }
        if job is not None:
            event["uid"] = job["metadata"].get("uid") or self.uid
            event["state"] = kinds.state(job)
            event["job"] = event_job(job)
        event.update(extra)
        return event

    async def run(self) -> AsyncIterator[TriggerEvent]:
        shared = SharedJobWatch.acquire(
            self.ref, self.namespace, self.kind, resolved=self._legacy_connection()
        )
        try:
            event = await self._wait(shared)
        except WatchFailedError as exc:
            event = self._event("error", message=f"{self.kind} {self.namespace}/{self.name}: {exc}")
        except Exception as exc:
            event = self._event("error", message=f"{type(exc).__name__}: {exc}")
        finally:
            await shared.release()
        yield TriggerEvent(event)  # type: ignore[no-untyped-call]  # untyped in Airflow

    async def _wait(self, shared: SharedJobWatch) -> Obj:
        last_line = ""
        last_logged = 0.0
        where = f"{self.kind} {self.namespace}/{self.name}"
        interval = min(self.status_interval, 30.0)
        async for job in shared.updates(self.name, interval=interval):
            if job is None:
                return self._event(
                    "error", message=f"{where} no longer exists: it was deleted while the task waited for it"
                )
            if self.uid and job["metadata"].get("uid") not in (None, self.uid):
                return self._event(
                    "error",
                    message=f"{where} was deleted while the task waited for it, and another {self.kind} "
                    "of that name took its place",
                )
            line = status_line(job)
            now = time.monotonic()
            if line != last_line or now - last_logged >= self.status_interval:
                # Kueue's reason for holding a queued job costs a read: only when a line is due
                waiting = await shared.client.admission_wait(job) if shared.client is not None else None
                self.log.info("%s", status_line(job, waiting=waiting))
                last_line, last_logged = line, now
            if kinds.is_finished(job):
                return await self._finished(job, shared)
            if self.deadline is not None and time.time() >= self.deadline:
                return self._event(
                    "timeout",
                    job,
                    message=f"{where} was still {kinds.state(job)} when the task's execution_timeout passed",
                )
        raise AssertionError("unreachable")

    async def _finished(self, job: Obj, shared: SharedJobWatch) -> Obj:
        client = shared.client if self.get_logs else None
        if kinds.state(job) == "Succeeded":
            logs = await client.logs(job, tail=LOG_TAIL, quiet=True) if client is not None else ""
            return self._event("success", job, logs=logs)
        reason, message = kinds.failure(job)
        if client is not None:
            whose, logs = await client.failure_logs(job)
        else:  # the lines of the replica that failed first are in the job itself: nothing to fetch
            whose, logs = kinds.first_failure_log(job) or ("rank 0", "")
        return self._event("failed", job, logs=logs, logs_of=whose, reason=reason, message=message)

    async def on_kill(self) -> None:
        """A user marked the deferred task failed or cleared it (Airflow 3.3+): stop the job."""
        if self.on_kill_action == "keep":
            return
        connection = self._legacy_connection() or await self.ref.resolve()
        async with await connection.aclient() as client:
            if self.on_kill_action == "suspend":
                await client.set_suspended(self.kind, self.name, self.namespace, True)
            else:
                await client.delete(self.kind, self.name, self.namespace)
        self.log.info(
            "%s %s/%s: %s after the task was killed",
            self.kind,
            self.namespace,
            self.name,
            "suspended" if self.on_kill_action == "suspend" else "deleted",
        )
