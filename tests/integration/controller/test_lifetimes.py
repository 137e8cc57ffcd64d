"""Deadlines and TTLs fire on time, and cleanPodPolicy decides what is left (reference §4.6, §4.7, §7.4)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import HANG, Jobs, condition, eventually, fails, lone_worker, metric, pytorchjob, runs_for


async def test_a_deadline_fires_on_a_job_that_receives_no_events(controller: Any, jobs: Jobs) -> None:
    # Every pod hangs: after they start nothing changes, so only a timed requeue can end the job.
    await jobs.create(
        pytorchjob(
            "slow",
            workers=1,
            master_annotations=HANG,
            worker_annotations=HANG,
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
    await jobs.create(
        pytorchjob(
            "short-lived",
            workers=1,
            master_annotations=runs_for("1s"),
            worker_annotations=runs_for("1s"),
            run_policy={"ttlSecondsAfterFinished": 3},
        )
    )
    await jobs.wait_condition("short-lived", "Succeeded")
    await eventually(lambda: _gone(jobs, "short-lived"), timeout=20, what="the TTL to delete the job")
    assert metric("training_operator_jobs_deleted_total", job_namespace=namespace, framework="pytorch") == 1


async def _gone(jobs: Jobs, name: str) -> bool:
    return await jobs.get(name) is None


async def test_ttl_also_applies_to_failed_jobs(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        lone_worker("failed-ttl", fails(1), restart_policy="Never", run_policy={"ttlSecondsAfterFinished": 2})
    )
    await jobs.wait_condition("failed-ttl", "Failed")
    await eventually(lambda: _gone(jobs, "failed-ttl"), timeout=20, what="the TTL to delete the failed job")


async def _live_pod_names(jobs: Jobs, name: str) -> list[str]:
    return sorted(p.metadata.name for p in await jobs.live_pods(name))


@pytest.mark.parametrize(
    ("policy", "left"),
    [
        ("None", ["clean-master-0", "clean-worker-0", "clean-worker-1"]),
        ("Running", ["clean-master-0"]),
        ("All", []),
    ],
)
async def test_clean_pod_policy_decides_what_a_finished_job_leaves(
    controller: Any, jobs: Jobs, policy: str, left: list[str]
) -> None:
    await jobs.create(
        pytorchjob(
            "clean",
            workers=2,
            master_annotations=runs_for("2s"),
            worker_annotations=HANG,
            run_policy={"cleanPodPolicy": policy},
        )
    )
    await jobs.wait_condition("clean", "Succeeded")

    async def settled() -> bool:
        return await _live_pod_names(jobs, "clean") == left

    await eventually(settled, what=f"pods left by cleanPodPolicy {policy} to be {left}")
    services = sorted(
        s.metadata.name for s in await jobs.services("clean") if not s.metadata.deletion_timestamp
    )
    assert services == (left if policy != "None" else ["clean-master-0", "clean-worker-0", "clean-worker-1"])


async def test_a_job_failed_by_its_deadline_keeps_no_running_pod_even_under_clean_pod_policy_none(
    controller: Any, jobs: Jobs
) -> None:
    # Upstream keeps the pods training under cleanPodPolicy None; a retry would then train beside them
    # on the same checkpoint dir. Finished pods stay, for their logs.
    await jobs.create(
        pytorchjob(
            "keep",
            workers=1,
            master_annotations=HANG,
            worker_annotations=runs_for("1s"),
            run_policy={"activeDeadlineSeconds": 4, "cleanPodPolicy": "None"},
        )
    )
    await jobs.wait_pods("keep", 1, phase="Succeeded", timeout=20)
    await jobs.wait_condition("keep", "Failed", timeout=20)

    async def only_finished_pods_left() -> bool:
        return await _live_pod_names(jobs, "keep") == ["keep-worker-0"]

    await eventually(only_finished_pods_left, what="the running master deleted, the finished worker kept")


async def test_a_controller_restarted_before_the_deadline_still_fires_it_on_time(
    start_controller: Any, jobs: Jobs
) -> None:
    first = await start_controller()
    await jobs.create(
        pytorchjob(
            "restarted",
            workers=1,
            master_annotations=HANG,
            worker_annotations=HANG,
            run_policy={"activeDeadlineSeconds": 6},
        )
    )
    await jobs.wait_condition("restarted", "Running")
    await first.stop()
    # The new controller learns the deadline from the job's startTime, not from any memory of the old.
    await start_controller()
    job = await jobs.wait_condition("restarted", "Failed", timeout=20)
    assert condition(job, "Failed")["reason"] == "DeadlineExceeded"
