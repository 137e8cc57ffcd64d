"""Gang scheduling with Volcano or scheduler-plugins: the PodGroup and pod fields the controller writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.support import HANG, Jobs, eventually, pytorchjob

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture(scope="session")
def podgroup_crds(kubectl: Any) -> None:
    for name in ("podgroups.scheduling.x-k8s.io.yaml", "podgroups.scheduling.volcano.sh.yaml"):
        kubectl("apply", "-f", str(FIXTURES / name))
        kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(FIXTURES / name))


@pytest.mark.usefixtures("podgroup_crds")
async def test_scheduler_plugins_gets_a_pod_group_with_min_resources(
    start_controller: Any, jobs: Jobs, custom: client.CustomObjectsApi, namespace: str
) -> None:
    await start_controller(gang_scheduler_name="scheduler-plugins-scheduler")
    job = pytorchjob(
        "cosched",
        workers=2,
        gpus=1,
        master_annotations=HANG,
        worker_annotations=HANG,
        run_policy={"schedulingPolicy": {"scheduleTimeoutSeconds": 30}},
    )
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"][
        "requests"
    ] = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    await jobs.create(job)
    pods = await jobs.wait_pods("cosched", 3)
    for pod in pods:
        assert pod.spec.scheduler_name == "scheduler-plugins-scheduler"
        assert pod.metadata.labels["scheduling.x-k8s.io/pod-group"] == "cosched"
    group = await custom.get_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", namespace, "podgroups", "cosched"
    )
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["scheduleTimeoutSeconds"] == 30
    assert group["spec"]["minResources"] == {"cpu": "1", "memory": str(2 * 2**30), "nvidia.com/gpu": "3"}


@pytest.mark.usefixtures("podgroup_crds")
async def test_volcano_pods_wait_until_the_pod_group_is_admitted(
    start_controller: Any, jobs: Jobs, custom: client.CustomObjectsApi, namespace: str
) -> None:
    await start_controller(gang_scheduler_name="volcano")
    await jobs.create(
        pytorchjob(
            "vc",
            workers=1,
            master_annotations=HANG,
            worker_annotations=HANG,
            run_policy={"schedulingPolicy": {"minAvailable": 2, "queue": "research"}},
        )
    )
    group = await eventually(lambda: _group(custom, namespace), what="the Volcano PodGroup")
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (2, "research")
    job = await jobs.wait_condition("vc", "Created")
    assert await jobs.pods("vc") == [], "pods must wait for Volcano to admit the group"
    assert job["status"].get("lastReconcileTime")
    await custom.patch_namespaced_custom_object_status(
        "scheduling.volcano.sh",
        "v1beta1",
        namespace,
        "podgroups",
        "vc",
        {"status": {"phase": "Inqueue"}},
        _content_type="application/merge-patch+json",
    )
    pods = await jobs.wait_pods("vc", 2)
    for pod in pods:
        assert pod.spec.scheduler_name == "volcano"
        assert pod.metadata.annotations["scheduling.k8s.io/group-name"] == "vc"
    assert {p.metadata.annotations["volcano.sh/task-spec"] for p in pods} == {"master", "worker"}


async def _group(custom: client.CustomObjectsApi, namespace: str) -> dict[str, Any] | None:
    try:
        group: dict[str, Any] = await custom.get_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", namespace, "podgroups", "vc"
        )
    except client.ApiException:
        return None
    return group
