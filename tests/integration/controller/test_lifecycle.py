"""A job's life as the API server sees it: Events, metrics, who manages it, rank 0's report.

What each pass decides (conditions, status, restarts) is unit-tested on ``decide``
(tests/unit/controller/test_v1_decisions.py); these tests check that the decisions reach the cluster.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from tests.support import HANG, Jobs, eventually, fails, metric, pytorchjob, runs_for


async def test_the_lifecycle_is_visible_in_events_and_metrics(
    controller: Any, jobs: Jobs, namespace: str
) -> None:
    await jobs.create(
        pytorchjob(
            "visible", workers=2, gpus=1, master_annotations=runs_for("2s"), worker_annotations=runs_for("2s")
        )
    )
    await jobs.wait_condition("visible", "Succeeded")
    reasons = await eventually(lambda: _reasons(jobs, "visible", "PyTorchJobSucceeded"), what="the events")
    assert {
        "PyTorchJobCreated",
        "SuccessfulCreatePod",
        "SuccessfulCreateService",
        "PyTorchJobSucceeded",
    } <= reasons
    labels = {"job_namespace": namespace, "framework": "pytorch"}
    assert metric("training_operator_jobs_created_total", **labels) == 1
    assert metric("training_operator_jobs_successful_total", **labels) == 1
    assert metric("training_operator_jobs_failed_total", **labels) == 0


async def test_a_job_whose_pods_take_long_to_create_says_it_is_created_meanwhile(
    start_controller: Any, jobs: Jobs
) -> None:
    """A job's first status is held back a second (docs/job-lifecycle.md), and its passes wait for the
    events of its creates: at 2 creates a second, 16 pods take about 8 s, and the job must not be
    without a status all that time."""
    await start_controller(kube_api_qps=2, kube_api_burst=1)
    await jobs.create(pytorchjob("slow", workers=15, pod_annotations=HANG))
    await jobs.wait_condition("slow", "Created", timeout=30)
    assert len(await jobs.pods("slow")) < 16, "Created came only once every pod was created"


async def _reasons(jobs: Jobs, name: str, last: str) -> set[str] | None:
    reasons = {reason for _, reason, _ in await jobs.events(name)}
    return reasons if last in reasons else None


async def test_a_job_managed_by_another_controller_is_left_alone(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob("kueue", run_policy={"managedBy": "kueue.x-k8s.io/multikueue", "suspend": True})
    )
    await jobs.create(pytorchjob("ours", master_annotations=HANG, worker_annotations=HANG))
    await jobs.wait_condition("ours", "Running")  # the controller has had its chance
    job = await jobs.get("kueue")
    assert job is not None and "status" not in job
    await jobs.patch("kueue", {"spec": {"runPolicy": {"suspend": False}}})
    await jobs.wait_pods("ours", 3)
    assert await jobs.pods("kueue") == []


async def test_rank_0s_report_written_as_the_failed_job_stops_it_reaches_the_job(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    """The controller stops a failed job's master; its last checkpoint, reported on the way out, is kept.

    A finalizer holds the master while it "writes" its report, as a kubelet would report the container's
    termination just before removing the pod: the pod is gone before any pass can read it from the cache.
    """
    await jobs.create(
        pytorchjob(
            "stopped",
            workers=1,
            restart_policy="Never",
            master_annotations=HANG,
            worker_annotations=fails(3, "2s"),
        )
    )
    master = "stopped-master-0"
    await jobs.wait_pods("stopped", 2)
    await core.patch_namespaced_pod(master, namespace, {"metadata": {"finalizers": [HOLD]}})
    await jobs.wait_condition("stopped", "Failed")

    async def being_deleted() -> client.V1Pod | None:
        pod = await core.read_namespaced_pod(master, namespace)
        return pod if pod.metadata.deletion_timestamp else None

    await eventually(being_deleted, what="the controller to stop the failed job's master")
    report = {"step": 60, "last_checkpoint": "/checkpoints/step-00000060"}
    status = {
        "name": "pytorch",
        "image": "example.com/train:1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 143, "reason": "Error", "message": json.dumps(report)}},
    }
    await core.patch_namespaced_pod_status(master, namespace, {"status": {"containerStatuses": [status]}})
    await core.patch_namespaced_pod(master, namespace, {"metadata": {"finalizers": None}})

    async def reported() -> str | None:
        job = await jobs.get("stopped")
        return ((job or {}).get("metadata", {}).get("annotations") or {}).get("kubetrain.dev/last-checkpoint")

    assert await eventually(reported, what="the master's report on the job") == "/checkpoints/step-00000060"


HOLD = "test.kubetrain.dev/hold"
