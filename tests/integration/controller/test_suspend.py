"""Suspend and resume (reference §4.3 d-e, §7.1 items 8-11)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support import HANG, Jobs, eventually, pytorchjob


def _conditions(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


async def test_a_job_created_suspended_gets_no_pods(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob("test-job", master_annotations=HANG, worker_annotations=HANG, run_policy={"suspend": True})
    )
    job = await jobs.wait_condition("test-job", "Suspended")
    assert _conditions(job) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Suspended", "True", "PyTorchJobSuspended"),
    ]
    assert "startTime" not in job["status"]
    assert await jobs.pods("test-job") == [] and await jobs.services("test-job") == []


async def test_suspending_deletes_pods_and_resuming_recreates_them(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("test-job", workers=1, master_annotations=HANG, worker_annotations=HANG))
    running = await jobs.wait_condition("test-job", "Running")
    started = running["status"]["startTime"]
    await jobs.wait_pods("test-job", 2)

    await jobs.patch("test-job", {"spec": {"runPolicy": {"suspend": True}}})
    suspended = await jobs.wait_condition("test-job", "Suspended")
    await eventually(lambda: _empty(jobs, "test-job"), what="pods and services to be deleted")
    assert suspended["status"]["startTime"] == started
    assert ("Running", "False", "PyTorchJobSuspended") in _conditions(suspended)
    assert _conditions(suspended)[-1] == ("Suspended", "True", "PyTorchJobSuspended")
    assert all("active" not in r for r in suspended["status"]["replicaStatuses"].values())

    await asyncio.sleep(1.1)  # timestamps have one-second resolution: let the clock move on
    await jobs.patch("test-job", {"spec": {"runPolicy": {"suspend": False}}})
    resumed = await jobs.wait_condition("test-job", "Running")
    await jobs.wait_pods("test-job", 2)
    assert ("Suspended", "False", "PyTorchJobResumed") in _conditions(resumed)
    assert resumed["status"]["startTime"] != started, "resuming restarts the job's clock"
    assert _conditions(resumed)[-1] == ("Running", "True", "PyTorchJobRunning")
    reasons = [reason for _, reason, _ in await jobs.events("test-job")]
    assert "PyTorchJobSuspended" in reasons and "PyTorchJobResumed" in reasons


async def _empty(jobs: Jobs, name: str) -> bool:
    pods = [p for p in await jobs.pods(name) if not p.metadata.deletion_timestamp]
    return not pods and not await jobs.services(name)
