"""A failed replica is deleted and recreated on the cluster, and the job says it restarts (reference §4.4).

Which failures restart and how restarts count against backoffLimit, under every restart policy, is
unit-tested on ``decide`` (tests/unit/controller/test_v1_decisions.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support import Jobs, condition, eventually, fails, pytorchjob


async def _worker_is_recreated(jobs: Jobs, name: str) -> None:
    """The job's one worker pod gets a successor: a live pod of the same name with another uid."""
    first = str((await jobs.wait_pods(name, 1))[0].metadata.uid)

    async def recreated() -> bool:
        pods = [p for p in await jobs.live_pods(name) if p.metadata.name.startswith(f"{name}-worker-0")]
        return any(p.metadata.uid != first for p in pods)

    await eventually(recreated, what=f"{name}-worker-0 to be recreated")


async def test_on_failure_recreates_a_failed_pod_and_reports_restarting(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob(
            "onfail",
            master=False,
            workers=1,
            restart_policy="OnFailure",
            worker_annotations=fails(1, after="1s"),
        )
    )
    restarting = asyncio.create_task(jobs.saw_condition("onfail", "Restarting"))
    try:
        await _worker_is_recreated(jobs, "onfail")
        job = await restarting
    finally:
        restarting.cancel()
    assert condition(job, "Restarting")["reason"] == "PyTorchJobRestarting"
    assert job["status"]["restartCount"] >= 1
    await jobs.wait_event("onfail", "PyTorchJobRestarting")
