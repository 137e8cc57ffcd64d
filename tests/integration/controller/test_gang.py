"""Gang scheduling with the scheduler's native PodGroup: all of a job's pods are placed, or none."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from tests.support import HANG, Jobs, eventually, pytorchjob


async def test_a_gang_that_cannot_fit_is_not_placed_at_all(
    start_controller: Any, jobs: Jobs, custom: client.CustomObjectsApi, namespace: str
) -> None:
    await start_controller(gang_scheduler_name="kubernetes")
    # 3 pods of 8 GPUs each; the cluster has 2 nodes of 8 GPUs: without gang scheduling 2 would start.
    await jobs.create(
        pytorchjob("too-big", workers=2, gpus=8, master_annotations=HANG, worker_annotations=HANG)
    )
    pods = await jobs.wait_pods("too-big", 3)
    assert all(p.spec.scheduling_group.pod_group_name == "too-big" for p in pods)
    group = await custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", "too-big"
    )
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    await asyncio.sleep(5)  # the scheduler has had many chances to place a partial gang
    assert not any(p.spec.node_name for p in await jobs.pods("too-big")), "part of the gang was placed"
    job = await jobs.get("too-big")
    assert job is not None and not any(c["type"] == "Running" for c in job["status"]["conditions"])

    # Shrinking the gang takes a suspend: the pod group is recreated for the new size on resume.
    await jobs.patch("too-big", {"spec": {"runPolicy": {"suspend": True}}})
    await jobs.wait_condition("too-big", "Suspended")
    await eventually(lambda: _no_pods(jobs, "too-big"), what="the suspended gang's pods to go")
    container = {
        "name": "pytorch",
        "image": "example.com/train:1",
        "resources": {"limits": {"nvidia.com/gpu": "4"}},
        "ports": [{"name": "pytorchjob-port", "containerPort": 8080}],
    }
    smaller = {"replicas": 1, "template": {"spec": {"containers": [container]}}}
    await jobs.patch(
        "too-big",
        {
            "spec": {
                "runPolicy": {"suspend": False},
                "pytorchReplicaSpecs": {"Master": smaller, "Worker": smaller},
            }
        },
    )
    await jobs.wait_condition("too-big", "Running", timeout=60)
    await jobs.wait_pods("too-big", 2, phase="Running")


async def _no_pods(jobs: Jobs, name: str) -> bool:
    return not await jobs.pods(name)


async def test_a_gang_that_fits_is_placed_together(start_controller: Any, jobs: Jobs) -> None:
    await start_controller(gang_scheduler_name="kubernetes")
    await jobs.create(pytorchjob("fits", workers=3, gpus=2, master_annotations=HANG, worker_annotations=HANG))
    await jobs.wait_pods("fits", 4, phase="Running", timeout=60)
    await jobs.wait_condition("fits", "Running")


async def test_a_pod_group_of_that_name_held_by_someone_else_fails_the_job_and_is_left_alone(
    start_controller: Any, jobs: Jobs, custom: client.CustomObjectsApi, namespace: str
) -> None:
    await start_controller(gang_scheduler_name="kubernetes")
    theirs = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "taken"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
    }
    await custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", theirs
    )
    await jobs.create(pytorchjob("taken", workers=1, master_annotations=HANG, worker_annotations=HANG))
    job = await jobs.wait_condition("taken", "Failed", timeout=30)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "NameConflict" and "PodGroup taken already exists" in failed["message"]
    group = await custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", "taken"
    )
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 5, "somebody else's group is not changed"
    assert not group["metadata"].get("deletionTimestamp"), "nor deleted"
    assert not await jobs.pods("taken")
