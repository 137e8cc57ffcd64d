"""Kueue preempts a running job for a higher-priority one by suspending it: kubetrain deletes its
pods without counting a failure, and runs it again, on a fresh clock, when Kueue re-admits it."""

from __future__ import annotations

import time
from typing import Any

from tests.kueue.test_admission import _time, gpu_job, queued
from tests.support import HANG, Jobs, condition, eventually, runs_for


async def test_a_preempted_job_loses_its_pods_without_failing_and_resumes(
    controller: Any, jobs: Jobs, queues: str
) -> None:
    # backoffLimit 0: one counted failure would fail the job.
    low = queued(
        gpu_job("low", gpus_per_pod=8, annotations=HANG, run_policy={"backoffLimit": 0}), priority="low"
    )
    await jobs.create(low)
    await jobs.wait_pods("low", 2, phase="Running", timeout=60)
    first_start = (await jobs.wait_condition("low", "Running"))["status"]["startTime"]

    preempting = time.monotonic()
    await jobs.create(queued(gpu_job("high", gpus_per_pod=4, annotations=runs_for("6s")), priority="high"))
    suspended = await jobs.wait_condition("low", "Suspended", timeout=60)
    await eventually(lambda: _no_pods(jobs, "low"), what="the preempted job's pods to go", timeout=30)
    preempted_after = time.monotonic() - preempting
    assert condition(suspended, "Running")["status"] == "False"
    assert not any(c["type"] == "Failed" for c in suspended["status"]["conditions"])
    reasons = {reason for _, reason, _ in await jobs.events("low")}
    assert "PyTorchJobSuspended" in reasons

    await jobs.wait_condition("high", "Succeeded", timeout=60)
    finished = time.monotonic()
    await jobs.wait_pods("low", 2, phase="Running", timeout=60)
    resumed = await jobs.wait_condition("low", "Running", timeout=30)
    resumed_after = time.monotonic() - finished
    assert condition(resumed, "Suspended") == condition(resumed, "Suspended") | {
        "status": "False",
        "reason": "PyTorchJobResumed",
    }
    assert _time(resumed["status"]["startTime"]) > _time(first_start)  # the clock restarts at re-admission
    assert not any(c["type"] == "Failed" for c in resumed["status"]["conditions"])
    print(
        f"preemption to pods gone: {preempted_after:.1f}s; quota free to pods Running: {resumed_after:.1f}s"
    )


async def _no_pods(jobs: Jobs, name: str) -> bool:
    return not await jobs.pods(name)
