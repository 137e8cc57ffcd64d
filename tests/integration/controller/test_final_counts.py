"""A finished job's replica counts say what is true: once a job failed and its pods were stopped, no
replica is active (docs/job-lifecycle.md), for every kind and every way a job fails.

The pass by pass rule is unit-tested on ``decide``; these tests check what ``kubectl get -o yaml``,
``kubetrain list`` and the operators read on the real API server, after the pods are gone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubetrain.api import kinds
from tests.support import HANG, Jobs, eventually, fails, training_runtime, trainjob

REPLICAS = 2  # workers of each job


def _v1_job(kind: kinds.V1Kind, name: str, how: str) -> dict[str, Any]:
    """A job of ``kind`` with a leader (where the kind has one besides its Workers) that runs on and
    ``REPLICAS`` Workers that fail (``replica``: for good; ``backoff``: past a backoff limit of 0) or run
    on past the deadline (``deadline``)."""
    leader = kind.leaders[0]
    restart_policy = "Never" if how == "replica" else "OnFailure"

    def replica(count: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {"name": kind.default_container, "image": "example.com/train:1"}
        return {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {"metadata": {"annotations": annotations}, "spec": {"containers": [container]}},
        }

    workers = dict(HANG) if how == "deadline" else fails(3, "2s")
    replicas = {"Worker": replica(REPLICAS, workers)}
    if leader != "Worker":
        replicas[leader] = replica(1, dict(HANG))
    run_policy = {"activeDeadlineSeconds": 4} if how == "deadline" else {"backoffLimit": 0}
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": name},
        "spec": {kind.replica_field: replicas, "runPolicy": run_policy},
    }


REASONS = {"replica": "Failed", "backoff": "BackoffLimitExceeded", "deadline": "DeadlineExceeded"}


@pytest.mark.parametrize("how", sorted(REASONS))
async def test_a_failed_job_of_every_kind_reports_no_active_replica_once_its_pods_are_stopped(
    how: str, controller: Any, jobs: Jobs
) -> None:
    manifests = {kind: _v1_job(kind, f"{how}-{kind.singular}", how) for kind in kinds.V1_JOBS}
    await asyncio.gather(*(jobs.create(m) for m in manifests.values()))
    for kind, manifest in manifests.items():
        name = manifest["metadata"]["name"]
        failed = await jobs.wait_condition(name, "Failed", kind=kind.kind, timeout=60)
        reason = next(c["reason"] for c in failed["status"]["conditions"] if c["type"] == "Failed")
        assert reason.endswith(REASONS[how]), f"{kind.kind} {name} failed as {reason}"
        await eventually(
            lambda name=name: _none_live(jobs, name), what=f"the pods of {kind.kind} {name} to be stopped"
        )
        job = await jobs.get(name, kind.kind)
        assert job is not None
        counts = {
            rtype: {k: v for k, v in entry.items() if k != "selector"}
            for rtype, entry in job["status"]["replicaStatuses"].items()
        }
        expected = {"Worker": {"failed": REPLICAS}}
        if kind.leaders[0] != "Worker":
            expected[kind.leaders[0]] = {"failed": 1}
        assert counts == expected, f"{kind.kind} {name}: {counts}"


async def _none_live(jobs: Jobs, name: str) -> bool:
    return not [p for p in await jobs.pods(name) if p.status.phase in ("Pending", "Running")]


async def test_a_trainjob_past_its_deadline_reports_no_active_child_job(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("late", "torch", activeDeadlineSeconds=3, trainer={"numNodes": 2}))
    await jobs.wait_trainjob_pods("late", 2, phase="Running")
    job = await jobs.wait_condition("late", "Failed", kind="TrainJob", timeout=30)
    [status] = job["status"]["jobsStatus"]
    assert (status["active"], status["ready"], status["failed"]) == (0, 0, 1), status
