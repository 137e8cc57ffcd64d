"""Suspend and resume reach the cluster: pods and services go, and come back (reference §4.3 d-e).

The conditions and the clock of a suspended and resumed job are unit-tested on ``decide``.
"""

from __future__ import annotations

from typing import Any

from tests.support import HANG, Jobs, eventually, pytorchjob


def _conditions(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


async def test_suspending_deletes_pods_and_resuming_recreates_them(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("test-job", workers=1, master_annotations=HANG, worker_annotations=HANG))
    await jobs.wait_condition("test-job", "Running")
    await jobs.wait_pods("test-job", 2)

    await jobs.patch("test-job", {"spec": {"runPolicy": {"suspend": True}}})
    suspended = await jobs.wait_condition("test-job", "Suspended")
    await eventually(lambda: _empty(jobs, "test-job"), what="pods and services to be deleted")
    assert _conditions(suspended)[-1] == ("Suspended", "True", "PyTorchJobSuspended")

    await jobs.patch("test-job", {"spec": {"runPolicy": {"suspend": False}}})
    resumed = await jobs.wait_condition("test-job", "Running")
    await jobs.wait_pods("test-job", 2)
    assert ("Suspended", "False", "PyTorchJobResumed") in _conditions(resumed)
    reasons = [reason for _, reason, _ in await jobs.events("test-job")]
    assert "PyTorchJobSuspended" in reasons and "PyTorchJobResumed" in reasons


async def _empty(jobs: Jobs, name: str) -> bool:
    pods = [p for p in await jobs.pods(name) if not p.metadata.deletion_timestamp]
    return not pods and not await jobs.services(name)
