"""Conditions, status, Events and metrics through a job's life (reference §4.4, §6, §7.1)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from tests.support import HANG, Jobs, eventually, fails, metric, pytorchjob, runs_for


def _types(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


async def test_a_running_job_is_created_then_running(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("test-job", workers=1, master_annotations=HANG, worker_annotations=HANG))
    job = await jobs.wait_condition("test-job", "Running")
    assert _types(job) == [("Created", "True", "PyTorchJobCreated"), ("Running", "True", "PyTorchJobRunning")]
    assert job["status"]["startTime"]
    job = await eventually(lambda: _workers_active(jobs, "test-job", 1), what="the worker counted active")
    assert job["status"]["replicaStatuses"]["Worker"]["selector"] == (
        "training.kubeflow.org/job-name=test-job,training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=worker"
    )


async def test_the_master_succeeding_completes_the_job(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob("done", workers=2, master_annotations=runs_for("2s"), worker_annotations=HANG)
    )
    job = await jobs.wait_condition("done", "Succeeded")
    assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    assert job["status"]["completionTime"]
    assert _types(job)[-1] == ("Succeeded", "True", "PyTorchJobSucceeded")
    assert ("Running", "False", "PyTorchJobRunning") in _types(job), (
        "Running turns False when the job finishes"
    )


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


async def _reasons(jobs: Jobs, name: str, last: str) -> set[str] | None:
    reasons = {reason for _, reason, _ in await jobs.events(name)}
    return reasons if last in reasons else None


async def test_a_never_policy_worker_failing_fails_the_job(
    controller: Any, jobs: Jobs, namespace: str
) -> None:
    await jobs.create(
        pytorchjob(
            "broken", workers=2, restart_policy="Never", master_annotations=HANG, worker_annotations=fails(3)
        )
    )
    job = await jobs.wait_condition("broken", "Failed")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PyTorchJobFailed"
    assert "Worker replica(s) failed" in failed["message"] and "exited with code 3" in failed["message"]
    assert _types(job)[-1][0] == "Failed"
    assert metric("training_operator_jobs_failed_total", job_namespace=namespace, framework="pytorch") == 1


async def test_master_success_wins_over_a_worker_failure_seen_together(
    start_controller: Any, jobs: Jobs
) -> None:
    handle = await start_controller()
    await jobs.create(
        pytorchjob(
            "race",
            workers=1,
            restart_policy="Never",
            master_annotations=runs_for("2s"),
            worker_annotations=fails(1, after="2s"),
        )
    )
    await jobs.wait_pods("race", 2)
    await handle.stop()  # let both pods finish unseen, so one pass observes both outcomes
    await jobs.wait_pods("race", 1, phase="Succeeded")
    await jobs.wait_pods("race", 1, phase="Failed")
    await handle.start()
    job = await eventually(lambda: _finished(jobs, "race"), what="race to finish")
    assert _types(job)[-1][0] == "Succeeded"


async def _finished(jobs: Jobs, name: str) -> dict[str, Any] | None:
    job = await jobs.get(name)
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    done = any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions)
    return job if done else None


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


async def test_kubetrain_mode_ignores_jobs_without_our_managed_by(start_controller: Any, jobs: Jobs) -> None:
    await start_controller(managed_by="kubetrain")
    await jobs.create(pytorchjob("upstream", master_annotations=HANG, worker_annotations=HANG))
    await jobs.create(
        pytorchjob(
            "mine",
            master_annotations=HANG,
            worker_annotations=HANG,
            run_policy={"managedBy": "kubetrain.dev/controller"},
        )
    )
    await jobs.wait_condition("mine", "Running")
    assert "status" not in (await jobs.get("upstream") or {})


async def _workers_active(jobs: Jobs, name: str, count: int) -> dict[str, Any] | None:
    job = await jobs.get(name)
    active = ((job or {}).get("status") or {}).get("replicaStatuses", {}).get("Worker", {}).get("active")
    return job if active == count else None


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
