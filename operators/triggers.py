"""The deferrable wait: a trigger that watches a training job's conditions.

A triggerer may hold hundreds of deferred training tasks. Each trigger does not
open a watch of its own: triggers of one cluster, namespace and kind share one
list+watch (``SharedJobWatch``), which keeps the latest copy of every job and
wakes the triggers whose job changed. So a hundred deferred tasks cost one
watch, not a hundred polls.

The trigger yields exactly one event: ``success``, ``failed`` (with the reason
and rank 0's log tail), ``timeout`` (the task's ``execution_timeout`` passed),
or ``error``. On Airflow 3.3+, ``on_kill`` runs when a user marks the deferred
task failed or clears it, and deletes or suspends the job as the operator says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiException

from kubetrain.client import AsyncJobClient, kinds
from kubetrain.operators.compat import BaseTrigger, TriggerEvent
from kubetrain.operators.hooks import ClusterConnection

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LOG_TAIL = 30


class SharedJobWatch:
    """One list+watch of one kind in one namespace, shared by every trigger waiting there."""

    _instances: ClassVar[dict[tuple[str, str, str], SharedJobWatch]] = {}

    def __init__(self, connection: ClusterConnection, namespace: str, kind: str) -> None:
        self.connection = connection
        self.namespace = namespace
        self.kind = kinds.kind_of(kind)
        self.jobs: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self._changed: dict[str, asyncio.Event] = {}
        self._users = 0
        self._task: asyncio.Task[None] | None = None
        self._client: AsyncJobClient | None = None

    @classmethod
    def acquire(cls, connection: ClusterConnection, namespace: str, kind: str) -> SharedJobWatch:
        key = (connection.key(), namespace, kinds.kind_of(kind).kind)
        shared = cls._instances.get(key)
        if shared is None:
            shared = cls._instances[key] = SharedJobWatch(connection, namespace, kind)
        shared._users += 1
        if shared._task is None or shared._task.done():
            shared._task = asyncio.get_running_loop().create_task(shared._run())
        return shared

    async def release(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        self._instances.pop((self.connection.key(), self.namespace, self.kind.kind), None)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._client is not None:
            await self._client.close()

    def changed(self, name: str) -> asyncio.Event:
        return self._changed.setdefault(name, asyncio.Event())

    def _store(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        obj.setdefault("kind", self.kind.kind)
        self.jobs[name] = obj
        self.changed(name).set()

    async def _run(self) -> None:
        self._client = await self.connection.aclient()
        custom = self._client.custom
        version = ""
        while True:
            try:
                if not version:
                    listed = await custom.list_namespaced_custom_object(
                        self.kind.group, self.kind.version, self.namespace, self.kind.plural
                    )
                    for item in listed.get("items") or []:
                        self._store(item)
                    version = listed["metadata"]["resourceVersion"]
                    self.synced.set()
                stream = watch.Watch()
                async with stream.stream(
                    custom.list_namespaced_custom_object,
                    self.kind.group,
                    self.kind.version,
                    self.namespace,
                    self.kind.plural,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=300,
                ) as events:
                    async for event in events:
                        obj = event["object"]
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event["type"] == "DELETED":
                            name = obj["metadata"]["name"]
                            self.jobs.pop(name, None)
                            self.changed(name).set()
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self._store(obj)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    version = ""
                    continue
                log.warning("watch of %s in %s failed: %s", self.kind.plural, self.namespace, exc)
                await asyncio.sleep(2)
            except Exception as exc:
                log.warning("watch of %s in %s dropped: %s", self.kind.plural, self.namespace, exc)
                await asyncio.sleep(1)

    async def updates(self, name: str, *, interval: float) -> AsyncIterator[Obj | None]:
        """The job each time it changes, and at least every ``interval`` seconds (None once it is gone)."""
        await self.synced.wait()
        while True:
            event = self.changed(name)
            event.clear()
            yield self.jobs.get(name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), interval)


status_line = kinds.status_line  # one line for a task log: what the job is doing


class JobTrigger(BaseTrigger):  # type: ignore[misc]
    """Wait for a training job to finish, over a watch shared by every trigger of that namespace."""

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        namespace: str,
        connection: dict[str, Any],
        deadline: float | None = None,
        status_interval: float = 60.0,
        on_kill_action: str = "delete",
        get_logs: bool = True,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.connection = connection
        self.deadline = deadline
        self.status_interval = status_interval
        self.on_kill_action = on_kill_action
        self.get_logs = get_logs

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "kubetrain.operators.triggers.JobTrigger",
            {
                "kind": self.kind,
                "name": self.name,
                "namespace": self.namespace,
                "connection": self.connection,
                "deadline": self.deadline,
                "status_interval": self.status_interval,
                "on_kill_action": self.on_kill_action,
                "get_logs": self.get_logs,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        connection = ClusterConnection.from_dict(self.connection)
        shared = SharedJobWatch.acquire(connection, self.namespace, self.kind)
        try:
            event = await self._wait(shared, connection)
        except Exception as exc:
            event = {
                "status": "error",
                "message": f"{type(exc).__name__}: {exc}",
                "name": self.name,
                "namespace": self.namespace,
                "kind": self.kind,
            }
        finally:
            await shared.release()
        yield TriggerEvent(event)

    async def _wait(self, shared: SharedJobWatch, connection: ClusterConnection) -> Obj:
        last_line = ""
        last_logged = 0.0
        identity = {"name": self.name, "namespace": self.namespace, "kind": self.kind}
        interval = min(self.status_interval, 30.0)
        async for job in shared.updates(self.name, interval=interval):
            if job is None:
                return {
                    "status": "error",
                    "message": f"{self.kind} {self.namespace}/{self.name} no longer exists",
                    **identity,
                }
            line = status_line(job)
            now = time.monotonic()
            if line != last_line or now - last_logged >= self.status_interval:
                self.log.info("%s", line)
                last_line, last_logged = line, now
            if kinds.is_finished(job):
                return await self._finished(job, connection, identity)
            if self.deadline is not None and time.time() >= self.deadline:
                return {
                    "status": "timeout",
                    "job": job,
                    **identity,
                    "message": f"{self.kind} {self.namespace}/{self.name} was still {kinds.state(job)} when the "
                    "task's execution_timeout passed",
                }
        raise AssertionError("unreachable")

    async def _finished(self, job: Obj, connection: ClusterConnection, identity: Obj) -> Obj:
        logs = ""
        if self.get_logs:
            async with await connection.aclient() as client:
                logs = await client.logs(job, tail=LOG_TAIL, quiet=True)
        if kinds.state(job) == "Succeeded":
            return {"status": "success", "job": job, "logs": logs, **identity}
        reason, message = kinds.failure(job)
        return {
            "status": "failed",
            "job": job,
            "logs": logs,
            "reason": reason,
            "message": message,
            **identity,
        }

    async def on_kill(self) -> None:
        """A user marked the deferred task failed or cleared it (Airflow 3.3+): stop the job."""
        if self.on_kill_action == "keep":
            return
        async with await ClusterConnection.from_dict(self.connection).aclient() as client:
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
