"""The kubelet's last step for the simulated nodes: remove a terminating pod, and only that pod.

A pod bound to a node is not removed by its DELETE: the API server sets ``deletionTimestamp`` and
waits for the node's kubelet to stop the containers and delete the pod for good (grace period 0).
The kubelet makes that final delete with the pod's uid as a precondition, because pod names come
back: a controller recreates a failed replica under the same name, and a delete by name alone,
arriving late, would remove the replacement instead.

kwok's ``delete`` stage deletes by name alone, and it can act on a pod twice (a second event for the
same terminating pod queues a second delete), so on kwok a replacement created in between could
vanish, which no real cluster does. So the simulated nodes leave the final delete to this loop,
which deletes with the uid precondition as a kubelet does. Pods on the process node are its own to
remove; unbound pods never wait for a kubelet.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubetrain import naming
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]

# The pods a simulated node runs: bound, and not to the process node.
SIMULATED_NODE_PODS = f"spec.nodeName!=,spec.nodeName!={naming.PROCESS_NODE}"
WORKERS = 8
RETRY_SECONDS = 1.0


def awaiting_removal(pod: Obj | None) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of a pod its node must now remove, or None. Like a kubelet, also a pod
    a finalizer holds: the API server removes it once the finalizer is gone."""
    if pod is None:
        return None
    meta = pod["metadata"]
    return (meta["namespace"], meta["name"], meta["uid"]) if meta.get("deletionTimestamp") else None


def _lean(pod: Obj) -> Obj:
    """What the loop reads of a pod (thousands of pods on a scale run)."""
    meta = pod["metadata"]
    return {
        "metadata": {
            key: meta[key]
            for key in ("namespace", "name", "uid", "resourceVersion", "deletionTimestamp")
            if key in meta
        }
    }


class PodFinalizer:
    """Deletes each terminating pod of the simulated nodes with grace period 0 and its uid."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.pods = Informer(kube, PODS, field_selector=SIMULATED_NODE_PODS, transform=_lean)
        self._queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
        self._queued: set[str] = set()  # uids in the queue: one delete per pod at a time
        self.pods.add_handler(lambda old, new: self._enqueue(awaiting_removal(new)))

    def _enqueue(self, target: tuple[str, str, str] | None) -> None:
        if target is not None and target[2] not in self._queued:
            self._queued.add(target[2])
            self._queue.put_nowait(target)

    async def run(self) -> None:
        self.pods.start()
        await asyncio.gather(*(self._work() for _ in range(WORKERS)))

    async def remove(self, namespace: str, name: str, uid: str) -> None:
        """The final delete of the pod ``uid``; a pod that now holds its name is left alone."""
        await self.kube.delete(PODS, name, namespace, uid=uid, propagation=None, grace_period_seconds=0)

    async def _work(self) -> None:
        """Remove queued pods one at a time; whatever a removal fails with, try that pod again later: a
        worker that ended on an unexpected error would leave its pod terminating for good (its uid
        stays marked queued, so no later event queues it again)."""
        while True:
            target = await self._queue.get()
            try:
                await self.remove(*target)
                self._queued.discard(target[2])
            except Exception as exc:  # any failure is retried, never the end of a worker
                log.warning("could not remove pod %s/%s (retrying): %r", target[0], target[1], exc)
                await asyncio.sleep(RETRY_SECONDS)
                self._queue.put_nowait(target)
