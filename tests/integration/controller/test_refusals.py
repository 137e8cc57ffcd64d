"""What the API server will not take ends the job with its message, instead of a wait nobody sees.

A name another object already holds, a TrainJob that cannot be built from its runtime, a pod template
the API server rejects: each used to leave the job waiting forever (or retrying until a deadline nobody
set) with at most an Event. Each now fails the job with a reason and a message that says what to fix.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from tests.faults.support import v1job
from tests.support import HANG, Jobs, eventually, pytorchjob, training_runtime, trainjob

TJ = "TrainJob"


def _failed(job: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in job["status"]["conditions"] if c["type"] == "Failed")


async def test_a_job_whose_pod_name_another_kind_holds_fails_with_a_name_conflict(
    controller: Any, jobs: Jobs
) -> None:
    await jobs.create(v1job("TFJob", "mnist", {"Worker": (1, HANG)}))
    await jobs.wait_condition("mnist", "Running", kind="TFJob")
    await jobs.create(pytorchjob("mnist", workers=1, master_annotations=HANG, worker_annotations=HANG))
    failed = _failed(await jobs.wait_condition("mnist", "Failed", timeout=30))
    assert failed["reason"] == "NameConflict"
    assert "mnist-worker-0 already exists and belongs to TFJob mnist" in failed["message"]
    await jobs.wait_event("mnist", "NameConflict")
    # The TFJob keeps its pod and is not touched.
    tfjob = await jobs.get("mnist", "TFJob")
    assert tfjob is not None and not any(c["type"] == "Failed" for c in tfjob["status"]["conditions"])
    [pod] = [p for p in await jobs.pods("mnist") if p.metadata.name == "mnist-worker-0"]
    assert pod.metadata.owner_references[0].kind == "TFJob" and not pod.metadata.deletion_timestamp


async def test_a_trainjob_named_like_an_existing_service_fails_with_a_name_conflict(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await core.create_namespaced_service(
        namespace, {"metadata": {"name": "serving"}, "spec": {"ports": [{"port": 80}]}}
    )
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("serving", "torch"))
    failed = _failed(await jobs.wait_condition("serving", "Failed", kind=TJ, timeout=30))
    assert failed["reason"] == "NameConflict"
    assert "Service serving already exists and belongs to no controller" in failed["message"]
    assert not await jobs.trainjob_pods("serving")


async def test_a_trainjob_that_cannot_be_built_fails_with_the_field_to_fix(
    controller: Any, jobs: Jobs
) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("nodata", "torch", initializer={"dataset": {"storageUri": "hf://x/y"}}))
    failed = _failed(await jobs.wait_condition("nodata", "Failed", kind=TJ, timeout=30))
    assert failed["reason"] == "BuildError"
    assert "spec.initializer.dataset is set but" in failed["message"]


async def test_a_missing_runtime_is_a_condition_until_it_exists(controller: Any, jobs: Jobs) -> None:
    await jobs.create(trainjob("early", "later"))
    waiting = await jobs.wait_condition("early", "Created", kind=TJ, status="False")
    created = next(c for c in waiting["status"]["conditions"] if c["type"] == "Created")
    assert created["reason"] == "TrainingRuntimeNotFound"
    assert "TrainingRuntime 'later' not found" in created["message"]
    await jobs.create(training_runtime("later", pod_annotations=HANG))
    await jobs.wait_trainjob_pods("early", 1)
    job = await jobs.get("early", TJ)
    assert job is not None
    assert not any(c["type"] == "Created" for c in job["status"].get("conditions") or []), (
        "upstream TrainJobs have no Created condition: it goes once the runtime exists"
    )


async def test_a_pod_template_the_api_server_rejects_fails_the_job_with_its_message(
    controller: Any, jobs: Jobs
) -> None:
    job = pytorchjob("badname", workers=20, master_annotations=HANG, worker_annotations=HANG)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"].append({"name": "Side_Car", "image": "busybox"})
    await jobs.create(job)
    failed = _failed(await jobs.wait_condition("badname", "Failed", timeout=60))
    assert failed["reason"] == "InvalidPodTemplate"
    assert "spec.containers[1].name" in failed["message"] and "Side_Car" in failed["message"]
    assert not await jobs.pods("badname")
    _, _, message = await jobs.wait_event("badname", "FailedCreatePod")
    assert "Side_Car" in message


async def test_a_replacement_pod_never_takes_the_name_of_a_failed_pod_that_is_still_there(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    # The test plays the kubelet (pods hang until it fails them) and the pod garbage collector.
    await jobs.create(training_runtime("torch", pod_annotations=HANG, backoff_limit=5))
    await jobs.create(trainjob("gc", "torch"))

    async def live_pod() -> client.V1Pod | None:
        # Running, not Pending: a pod failed while kwok's start is still due would be set Running again.
        pods = [p for p in await jobs.trainjob_pods("gc") if p.status.phase in ("Pending", "Running")]
        running = len(pods) == 1 and pods[0].status.phase == "Running"
        return pods[0] if running else None

    async def fail(pod: client.V1Pod) -> None:
        status = {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "node",
                    "image": "example.com/train:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                }
            ],
        }
        await jobs.set_pod_status(pod.metadata.name, status)

    first = await eventually(live_pod, what="the first pod")
    await fail(first)
    second = await eventually(
        lambda: _other_than(live_pod, {first.metadata.name}), what="the first replacement"
    )
    # The first failed pod is garbage-collected; then the replacement fails too.
    await core.delete_namespaced_pod(first.metadata.name, namespace, grace_period_seconds=0)
    await fail(second)
    third = await eventually(
        lambda: _other_than(live_pod, {first.metadata.name, second.metadata.name}),
        timeout=20,
        what="a second replacement, named like no pod before it",
    )
    job = await jobs.get("gc", TJ)
    assert job is not None and job["status"]["jobFailures"] == {"node-0": 2}
    assert third.metadata.name not in (first.metadata.name, second.metadata.name)


async def _other_than(probe: Any, names: set[str]) -> client.V1Pod | None:
    pod: client.V1Pod | None = await probe()
    return pod if pod is not None and pod.metadata.name not in names else None
