"""A killed controller leaves nothing behind twice, and many jobs at once all end where they should."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support import HANG, Jobs, eventually, fails, pytorchjob, runs_for, start_controller_process


@pytest.mark.usefixtures("crds")
async def test_a_controller_killed_mid_job_and_restarted_makes_no_duplicates_or_orphans(
    kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    log = tmp_path / "controller.log"
    workers = 40
    # A slow client (2 requests/s) so the kill lands while the job's pods are still being created.
    first = start_controller_process(
        kubeconfig, namespace, log, "--kube-api-qps", "2", "--kube-api-burst", "1"
    )
    try:
        await jobs.create(
            pytorchjob("survivor", workers=workers, master_annotations=HANG, worker_annotations=HANG)
        )
        await eventually(lambda: _some_pods(jobs, "survivor"), timeout=60, what="the first pods")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    created_before_kill = len(await jobs.pods("survivor"))
    assert created_before_kill < workers + 1, "the kill should land mid-creation"
    second = start_controller_process(kubeconfig, namespace, log)
    try:
        await eventually(lambda: _started_twice(log), timeout=60, what="the second controller to start")
        pods = await jobs.wait_pods("survivor", workers + 1, timeout=60)
        running = await jobs.wait_condition("survivor", "Running", timeout=60)
        await asyncio.sleep(2)  # give a duplicate create every chance to happen before counting
        pods = await jobs.pods("survivor")
        assert sorted(p.metadata.name for p in pods) == sorted(
            ["survivor-master-0"] + [f"survivor-worker-{i}" for i in range(workers)]
        )
        assert len(await jobs.services("survivor")) == workers + 1
        uid = running["metadata"]["uid"]
        assert all(p.metadata.owner_references[0].uid == uid for p in pods)
        assert running["status"]["replicaStatuses"]["Worker"].get("active", 0) <= workers
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0, log.read_text()[-2000:]
    await jobs.delete("survivor")
    await eventually(
        lambda: _no_children(jobs, "survivor"),
        timeout=60,
        what="garbage collection of the deleted job's pods and services",
    )


async def _started_twice(log: Path) -> bool:
    return log.read_text().count("controller started") >= 2


async def _some_pods(jobs: Jobs, name: str) -> bool:
    return len(await jobs.pods(name)) >= 1


async def _no_children(jobs: Jobs, name: str) -> bool:
    pods = await jobs.pods(name)
    return not pods and not await jobs.services(name)


async def test_fifty_concurrent_jobs_all_reach_the_right_terminal_state(controller: Any, jobs: Jobs) -> None:
    expected: dict[str, str] = {}
    manifests = []
    for i in range(50):
        name = f"many-{i:02d}"
        if i % 3 == 0:
            manifests.append(
                pytorchjob(
                    name, workers=1, master_annotations=runs_for("2s"), worker_annotations=runs_for("2s")
                )
            )
            expected[name] = "Succeeded/PyTorchJobSucceeded"
        elif i % 3 == 1:
            manifests.append(
                pytorchjob(
                    name,
                    workers=1,
                    restart_policy="Never",
                    master_annotations=HANG,
                    worker_annotations=fails(2, after="2s"),
                )
            )
            expected[name] = "Failed/PyTorchJobFailed"
        else:
            manifests.append(
                pytorchjob(
                    name,
                    workers=1,
                    master_annotations=HANG,
                    worker_annotations=fails(1, "1s"),
                    run_policy={"backoffLimit": 1},
                )
            )
            expected[name] = "Failed/BackoffLimitExceeded"
    await asyncio.gather(*(jobs.create(m) for m in manifests))

    async def outcomes() -> dict[str, str] | None:
        listed = await jobs.custom.list_namespaced_custom_object(
            "kubeflow.org", "v1", jobs.namespace, "pytorchjobs"
        )
        found = {}
        for job in listed["items"]:
            last = ((job.get("status") or {}).get("conditions") or [{}])[-1]
            if last.get("type") in ("Succeeded", "Failed"):
                found[job["metadata"]["name"]] = f"{last['type']}/{last['reason']}"
        return found if len(found) == len(expected) else None

    assert await eventually(outcomes, timeout=120, interval=0.5, what="all 50 jobs to finish") == expected
