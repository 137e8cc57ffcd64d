"""Deadlines and TTLs fire on time on the cluster, with no event to wake the controller (reference §4.6, §4.7).

When they are due, and what cleanPodPolicy leaves, is unit-tested on ``decide``.
"""

from __future__ import annotations

from typing import Any

from tests.support import HANG, Jobs, condition, eventually, metric, pytorchjob


async def test_a_deadline_fires_on_a_job_that_receives_no_events(controller: Any, jobs: Jobs) -> None:
    # Every pod hangs: after they start nothing changes, so only a timed requeue can end the job.
    await jobs.create(
        pytorchjob(
            "slow",
            workers=1,
            pod_annotations=HANG,
            run_policy={"activeDeadlineSeconds": 4, "cleanPodPolicy": "All"},
        )
    )
    await jobs.wait_condition("slow", "Running")
    job = await jobs.wait_condition("slow", "Failed", timeout=20)
    failed = condition(job, "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert "active longer than the specified deadline of 4s" in failed["message"]
    await eventually(lambda: _no_pods(jobs, "slow"), what="the pods to be deleted (cleanPodPolicy All)")


async def _no_pods(jobs: Jobs, name: str) -> bool:
    return not await jobs.live_pods(name)


async def test_ttl_deletes_a_finished_job_on_time(controller: Any, jobs: Jobs, namespace: str) -> None:
    await jobs.run_to_ttl_deletion("short-lived", runs="1s", ttl_seconds=3, timeout=20)
    assert metric("training_operator_jobs_deleted_total", job_namespace=namespace, framework="pytorch") == 1
