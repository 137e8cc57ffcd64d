"""A failed replica is deleted and recreated on the cluster, and the job says it restarts (reference §4.4).

Which failures restart and how restarts count against backoffLimit, under every restart policy, is
unit-tested on ``decide`` (tests/unit/controller/test_v1_decisions.py).
"""

from __future__ import annotations

from typing import Any

from tests.support import Jobs, eventually, fails, pytorchjob


def _condition(job: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in job["status"]["conditions"] if c["type"] == ctype)


async def _worker_uid(jobs: Jobs, name: str) -> str:
    pods = await jobs.wait_pods(name, 1)
    return str(pods[0].metadata.uid)


async def _recreated(jobs: Jobs, name: str, old_uid: str) -> str:
    async def probe() -> str | None:
        pods = [p for p in await jobs.pods(name) if p.metadata.name.startswith(f"{name}-worker-0")]
        fresh = [p for p in pods if p.metadata.uid != old_uid and not p.metadata.deletion_timestamp]
        return str(fresh[0].metadata.uid) if fresh else None

    return await eventually(probe, what=f"{name}-worker-0 to be recreated")


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
    first = await _worker_uid(jobs, "onfail")
    await _recreated(jobs, "onfail", first)
    job = await jobs.wait_condition("onfail", "Restarting")
    assert _condition(job, "Restarting")["reason"] == "PyTorchJobRestarting"
    assert job["status"]["restartCount"] >= 1
    await jobs.wait_event("onfail", "PyTorchJobRestarting")
