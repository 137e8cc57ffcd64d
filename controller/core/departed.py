"""Pods that left the cache with a training report no reconcile has read yet.

Rank 0 writes its report (the last checkpoint) as its termination message when it
exits, also when the controller stops it because the job failed. The pod is then
removed at once, and the pass that could read the report waits for that very
deletion to be observed (expectations): the deleted pod's last state, seen by the
pod handler, is the only copy left. This keeps it per job until a pass has copied
it into the job's annotations. It lives in memory only: a controller restarted in
that instant loses the report, as it would lose a pod's logs.
"""

from __future__ import annotations

from kubetrain.api.objects import Obj
from kubetrain.controller.core.observe import termination_report


class DepartedPods:
    """Per job key, the last state of deleted pods that carried a training report."""

    def __init__(self) -> None:
        self._by_job: dict[str, dict[str, Obj]] = {}

    def keep(self, key: str, pod: Obj) -> None:
        """Called with a deleted pod: keep it if any of its containers left a report."""
        if termination_report(pod) is not None:
            self._by_job.setdefault(key, {})[pod["metadata"]["name"]] = pod

    def take(self, key: str) -> list[Obj]:
        """The pods kept for the job, now forgotten (``restore`` them if copying their report fails)."""
        return list(self._by_job.pop(key, {}).values())

    def restore(self, key: str, pods: list[Obj]) -> None:
        kept = self._by_job.setdefault(key, {})
        for pod in pods:
            kept.setdefault(pod["metadata"]["name"], pod)

    def forget(self, key: str) -> None:
        self._by_job.pop(key, None)
