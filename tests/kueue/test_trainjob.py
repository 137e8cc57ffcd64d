"""A TrainJob through Kueue's trainer integration: held suspended while the quota is used, admitted
when it frees, with the flavor's node labels and tolerations (a runtime patch of Kueue's) on every
pod."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.kueue.test_admission import FLAVOR_SELECTOR, FLAVOR_TOLERATION, _tolerations, gpu_job, queued
from tests.support import HANG, Jobs, runs_for, training_runtime, trainjob

TJ = "TrainJob"
GPUS = {"limits": {"nvidia.com/gpu": "4"}}


async def test_a_queued_trainjob_waits_for_quota_then_runs_on_the_flavor(
    controller: Any, jobs: Jobs, queues: str
) -> None:
    await jobs.create(queued(gpu_job("first", gpus_per_pod=8, annotations=runs_for("8s"))))
    await jobs.wait_pods("first", 2, phase="Running", timeout=60)

    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    created = await jobs.create(
        queued(trainjob("tuned", "torch", trainer={"numNodes": 2, "resourcesPerNode": GPUS}))
    )
    assert created["spec"]["suspend"] is True  # Kueue's webhook
    held = await jobs.wait_condition("tuned", "Suspended", kind=TJ, timeout=30)
    assert held["spec"]["suspend"] is True
    assert await jobs.trainjob_pods("tuned") == []

    await jobs.wait_condition("first", "Succeeded", timeout=60)
    pods = await jobs.wait_trainjob_pods("tuned", 2, phase="Running", timeout=60)
    for pod in pods:
        assert pod.spec.node_selector == FLAVOR_SELECTOR
        assert FLAVOR_TOLERATION in _tolerations(pod)
    admitted = await jobs.get("tuned", TJ)
    assert admitted is not None
    assert [p["manager"] for p in admitted["spec"]["runtimePatches"]] == ["kueue.x-k8s.io/manager"]


async def test_with_kueue_a_trainjob_naming_a_missing_runtime_is_refused_even_unqueued(
    controller: Any, jobs: Jobs, queues: str
) -> None:
    # Kueue's TrainJob webhook reads the runtime of every TrainJob, queued or not; without Kueue,
    # kubetrain accepts the TrainJob and reports the missing runtime in a condition until it exists.
    with pytest.raises(client.ApiException) as refused:
        await jobs.create(trainjob("early", "not-yet"))
    assert refused.value.status == 403 and "runtime 'not-yet' not found" in refused.value.body
