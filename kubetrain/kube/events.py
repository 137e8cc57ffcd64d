"""Kubernetes Events about jobs, posted in the background and aggregated.

Recording an event never blocks a reconcile: events go into a bounded queue
that one task drains (when the queue is full, events are dropped and counted,
as client-go's broadcaster does). The same reason and message on the same
object within ``aggregate_window`` bumps the existing Event's count instead of
creating a new one, so a job that is reconciled often does not flood the
namespace.

An event carries the time it was recorded, as client-go's do, not the time it was posted: in a
burst of thousands of jobs the queue falls seconds behind, and an Event stamped when posted would say
a pod was created after it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import uuid
from collections import OrderedDict
from typing import Any, NamedTuple

from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient, Obj
from kubetrain.kube.resources import EVENTS

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pending(NamedTuple):
    """An event recorded and not yet posted."""

    involved: Obj
    event_type: str
    reason: str
    message: str
    stamp: str  # when it was recorded, as the Event's timestamps say it


class EventRecorder:
    def __init__(
        self, kube: KubeClient, component: str, *, capacity: int = 10000, aggregate_window: float = 600.0
    ) -> None:
        self.kube = kube
        self.component = component
        self.aggregate_window = aggregate_window
        self._queue: asyncio.Queue[Pending] = asyncio.Queue(capacity)
        self._recent: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float]] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._drain(), name="event-recorder")

    async def stop(self, grace: float = 5.0) -> None:
        """Post what is queued (up to ``grace`` seconds), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def event(self, obj: Obj, event_type: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (a job); returns at once.

        The queue keeps a reference to the object as it is now (kind, name, uid, resourceVersion),
        never the object: a reconciler's copy of a job holds its whole spec and status, and at
        thousands of jobs the queue can hold thousands of events waiting for the one task that posts
        them."""
        meta = obj["metadata"]
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace") or "default",
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        try:
            self._queue.put_nowait(Pending(involved, event_type, reason, message, _now()))
        except asyncio.QueueFull:
            self.dropped += 1

    async def _drain(self) -> None:
        while True:
            pending = await self._queue.get()
            try:
                await self._post(pending)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("could not post event %s on %s: %s", pending.reason, pending.involved["name"], exc)
            finally:
                self._queue.task_done()

    async def _post(self, pending: Pending) -> None:
        involved, event_type, reason, message, stamp = pending
        namespace = involved["namespace"]
        key = (involved["uid"] or "", event_type, reason, message)
        loop_now = asyncio.get_running_loop().time()
        previous = self._recent.get(key)
        if previous is not None and loop_now - previous[3] < self.aggregate_window:
            name, first, count, _ = previous
            patch = {"count": count + 1, "lastTimestamp": stamp}
            try:
                await self.kube.patch(EVENTS, name, patch, namespace=namespace)
                self._remember(key, (name, first, count + 1, loop_now))
                return
            except errors.APINotFoundError:
                pass
        name = f"{involved['name']}.{uuid.uuid4().hex[:16]}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self.component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
        }
        await self.kube.create(EVENTS, body, namespace)
        self._remember(key, (name, stamp, 1, loop_now))

    def _remember(self, key: tuple[str, str, str, str], value: tuple[str, str, int, float]) -> None:
        self._recent[key] = value
        self._recent.move_to_end(key)
        while len(self._recent) > 4096:
            self._recent.popitem(last=False)
