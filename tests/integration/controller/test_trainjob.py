"""TrainJobs reconciled straight into pods on KWOK nodes: identity, JobSet semantics, lifecycle."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kubernetes_asyncio import client

from tests.conftest import Kubectl
from tests.support import (
    HANG,
    Jobs,
    claims_runtime,
    eventually,
    fails,
    runs_for,
    runtime_patch,
    training_runtime,
    trainjob,
)

TJ = "TrainJob"


def _conditions(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in (job.get("status") or {}).get("conditions") or []]


def _env(pod: client.V1Pod) -> dict[str, Any]:
    container = next(c for c in pod.spec.containers if c.name == "node")
    return {
        e.name: e.value if e.value is not None else e.value_from.field_ref.field_path for e in container.env
    }


async def test_pods_and_the_headless_service_have_the_identity_the_sdk_looks_for(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(
        trainjob("mnist", "torch", trainer={"numNodes": 2, "env": [{"name": "LR", "value": "0.1"}]})
    )
    pods = await jobs.wait_trainjob_pods("mnist", 2, phase="Running")
    by_index = {p.metadata.labels["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1"]
    rank1 = by_index["1"]
    assert rank1.metadata.name.startswith("mnist-node-0-1-")
    assert (rank1.spec.hostname, rank1.spec.subdomain) == ("mnist-node-0-1", "mnist")
    assert rank1.metadata.owner_references[0].kind == "TrainJob"
    env = _env(rank1)
    assert env["LR"] == "0.1"
    assert (env["PET_NNODES"], env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == (
        "2",
        "mnist-node-0-0.mnist",
        "29500",
    )
    assert env["PET_NODE_RANK"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    # What the kubeflow SDK selects a TrainJob's pods by.
    selected = await core.list_namespaced_pod(
        namespace,
        label_selector="jobset.sigs.k8s.io/jobset-name=mnist,"
        "jobset.sigs.k8s.io/replicatedjob-name in (dataset-initializer, model-initializer, launcher, node)",
    )
    assert len(selected.items) == 2
    service = await core.read_namespaced_service("mnist", namespace)
    assert service.spec.cluster_ip == "None" and service.spec.publish_not_ready_addresses
    assert service.spec.selector == {"jobset.sigs.k8s.io/jobset-name": "mnist"}
    job = await eventually(lambda: _with_jobs_status(jobs, "mnist"), what="jobsStatus")
    assert job["status"]["jobsStatus"] == [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    ]
    assert _conditions(job) == [], "a running TrainJob has no condition (upstream has no Running)"


async def _with_jobs_status(jobs: Jobs, name: str) -> dict[str, Any] | None:
    job = await jobs.get(name, TJ)
    statuses = ((job or {}).get("status") or {}).get("jobsStatus") or []
    return job if statuses and statuses[0].get("ready") else None


async def test_every_pod_succeeding_completes_the_trainjob(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=runs_for("2s")))
    await jobs.create(trainjob("done", "torch", trainer={"numNodes": 2}))
    job = await jobs.wait_condition("done", "Complete", kind=TJ)
    assert _conditions(job)[-1] == ("Complete", "True", "AllJobsCompleted")
    assert job["status"]["jobsStatus"][0]["succeeded"] == 1
    assert len(await jobs.trainjob_pods("done")) == 2, "finished pods stay for their logs"


async def test_a_failing_trainer_restarts_under_max_restarts_then_fails_with_the_reason(
    controller: Any, jobs: Jobs
) -> None:
    runtime = training_runtime(
        "flaky", pod_annotations=fails(code=3, after="1s"), backoff_limit=0, failurePolicy={"maxRestarts": 1}
    )
    await jobs.create(runtime)
    await jobs.create(trainjob("flaky", "flaky", trainer={"numNodes": 2}))
    job = await jobs.wait_condition("flaky", "Failed", kind=TJ, timeout=60)
    [failed] = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "ReachedMaxRestarts"
    assert "exited with code 3" in failed["message"] and "maxRestarts 1" in failed["message"]
    assert job["status"]["restarts"] == 1
    attempts = {
        p.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] for p in await jobs.trainjob_pods("flaky")
    }
    assert attempts == {"1"}, "the first attempt's pods were deleted on restart"
    reasons = [e[1] for e in await jobs.events("flaky")]
    assert "Restarting" in reasons and "ReachedMaxRestarts" in reasons


async def test_a_failed_pod_is_replaced_within_the_job_backoff_limit(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("never", pod_annotations=fails(code=1, after="1s"), backoff_limit=2))
    await jobs.create(trainjob("retry", "never", trainer={"numNodes": 1}))
    job = await jobs.wait_condition("retry", "Failed", kind=TJ, timeout=60)
    assert _conditions(job)[-1][2] == "FailedJobs"
    assert len(await jobs.trainjob_pods("retry")) == 3, "the first pod and two replacements (backoffLimit 2)"


async def test_the_trainer_waits_for_its_initializer_to_complete(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("init", pod_annotations=runs_for("1s"), initializer=runs_for("3s")))
    await jobs.create(trainjob("staged", "init", initializer={"dataset": {"storageUri": "hf://org/data"}}))
    [init] = await jobs.wait_trainjob_pods("staged", 1, phase="Running")
    assert init.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "dataset-initializer"
    container = init.spec.containers[0]
    assert {e.name: e.value for e in container.env}["STORAGE_URI"] == "hf://org/data"
    await asyncio.sleep(1)
    assert len(await jobs.trainjob_pods("staged")) == 1, (
        "the trainer started before its initializer completed"
    )
    await jobs.wait_condition("staged", "Complete", kind=TJ, timeout=30)
    names = sorted(
        p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] for p in await jobs.trainjob_pods("staged")
    )
    assert names == ["dataset-initializer", "node"]


async def test_suspend_deletes_the_pods_and_resume_recreates_them(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("paused", "torch", suspend=True, trainer={"numNodes": 2}))
    job = await jobs.wait_condition("paused", "Suspended", kind=TJ)
    assert job["status"]["jobsStatus"][0]["suspended"] == 1
    assert not await jobs.trainjob_pods("paused")
    await jobs.patch("paused", {"spec": {"suspend": False}}, kind=TJ)
    await jobs.wait_trainjob_pods("paused", 2, phase="Running")
    job = await jobs.wait_condition("paused", "Suspended", kind=TJ, status="False")
    assert ("Suspended", "False", "Resumed") in _conditions(job)
    await jobs.patch("paused", {"spec": {"suspend": True}}, kind=TJ)
    await eventually(lambda: _none(jobs, "paused"), what="the suspended job's pods to go")


async def _none(jobs: Jobs, name: str) -> bool:
    return not await jobs.trainjob_pods(name)


async def test_the_active_deadline_fails_the_job_on_time_and_deletes_its_pods(
    controller: Any, jobs: Jobs
) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("slow", "torch", activeDeadlineSeconds=4))
    job = await jobs.wait_condition("slow", "Failed", kind=TJ, timeout=30)
    assert _conditions(job)[-1] == ("Failed", "True", "DeadlineExceeded")
    await eventually(lambda: _none(jobs, "slow"), what="the pods of the timed-out job to go")


async def test_the_ttl_annotation_deletes_a_finished_trainjob(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=runs_for("1s")))
    await jobs.create(
        trainjob("brief", "torch", annotations={"kubetrain.dev/ttl-seconds-after-finished": "2"})
    )
    await jobs.wait_condition("brief", "Complete", kind=TJ)
    await eventually(
        lambda: _gone(jobs, "brief"), what="the TrainJob to be deleted after its TTL", timeout=20
    )


async def test_no_ttl_deletes_the_claim_that_holds_a_trainjobs_output(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    # A TrainJob submitted without the Airflow operator's check (kubectl, the CLI, KFP) keeps its
    # checkpoints on a claim its runtime deletes with it. Both TTLs pass: the JobSet's takes the
    # downloads' claim and keeps the output's; the TrainJob's is held, saying why.
    runtime = claims_runtime("deletes-output", output_retained=False)
    runtime["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = 1
    await jobs.create(runtime)
    ttl = {
        "kubetrain.dev/ttl-seconds-after-finished": "1",
        "kubetrain.dev/checkpoint-dir": "/workspace/output",
    }
    await jobs.create(trainjob("held", "deletes-output", annotations=ttl))
    await jobs.wait_condition("held", "Complete", kind=TJ, timeout=60)

    async def held() -> dict[str, Any] | None:
        job = await jobs.get("held", TJ)
        assert job is not None, "the TrainJob was deleted, and its output claim with it"
        return job if ("DeletionHeld", "True", "OutputOnOwnedClaim") in _conditions(job) else None

    job = await eventually(held, timeout=30, what="the TTL deletion to be held")
    assert _conditions(job)[-1] == ("Complete", "True", "AllJobsCompleted"), "it still reads as Complete"
    message = next(c["message"] for c in job["status"]["conditions"] if c["type"] == "DeletionHeld")
    assert "would delete the claim output-held, which holds /workspace/output" in message
    assert any(e[:2] == ("Warning", "DeletionHeld") for e in await jobs.events("held"))

    async def scratch_gone() -> bool:
        listed = await core.list_namespaced_persistent_volume_claim(namespace)
        alive = {c.metadata.name for c in listed.items if c.metadata.deletion_timestamp is None}
        assert "output-held" in alive, "the JobSet TTL deleted the output's claim"
        return "scratch-held" not in alive

    await eventually(scratch_gone, timeout=30, what="the JobSet TTL to delete the downloads' claim")
    await asyncio.sleep(2)  # past both TTLs by more than a pass: still held
    assert await held() is not None


async def _gone(jobs: Jobs, name: str) -> bool:
    return await jobs.get(name, TJ) is None


async def test_the_runtime_is_snapshotted_so_deleting_it_does_not_break_the_job(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("kept", "torch", trainer={"numNodes": 2}))
    await jobs.wait_trainjob_pods("kept", 2)
    snapshot = await core.read_namespaced_config_map("kept-runtime-snapshot", namespace)
    assert "replicatedJobs" in snapshot.data["runtime"]
    assert snapshot.metadata.owner_references[0].kind == "TrainJob"
    await jobs.delete("torch", "TrainingRuntime")
    await jobs.patch("kept", {"spec": {"suspend": True}}, kind=TJ)
    await eventually(lambda: _none(jobs, "kept"), what="the suspended job's pods to go")
    await jobs.patch("kept", {"spec": {"suspend": False}}, kind=TJ)
    await jobs.wait_trainjob_pods("kept", 2)


async def test_a_missing_runtime_is_reported_and_the_job_starts_once_it_exists(
    controller: Any, jobs: Jobs
) -> None:
    await jobs.create(trainjob("early", "later"))
    _, _, message = await jobs.wait_event("early", "TrainJobResourcesCreationFailed")
    assert "TrainingRuntime 'later' not found" in message
    await jobs.create(training_runtime("later", pod_annotations=runs_for("1s")))
    await jobs.wait_condition("early", "Complete", kind=TJ, timeout=30)


async def test_runtime_patches_reach_the_pods(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    patch = runtime_patch(
        {
            "metadata": {"labels": {"team": "vision"}},
            "spec": {"serviceAccountName": "default", "priorityClassName": None},
        }
    )
    await jobs.create(trainjob("patched", "torch", runtimePatches=[patch]))
    [pod] = await jobs.wait_trainjob_pods("patched", 1)
    assert pod.metadata.labels["team"] == "vision"


async def test_trainjobs_managed_elsewhere_are_left_alone(controller: Any, jobs: Jobs) -> None:
    await jobs.create(training_runtime("torch", pod_annotations=HANG))
    await jobs.create(trainjob("remote", "torch", managedBy="kueue.x-k8s.io/multikueue"))
    await asyncio.sleep(2)
    assert not await jobs.trainjob_pods("remote")
    job = await jobs.get("remote", TJ)
    assert job is not None and not (job.get("status") or {}).get("conditions")


async def test_an_unsupported_runtime_api_group_fails_the_job(controller: Any, jobs: Jobs) -> None:
    job = trainjob("odd", "torch")
    job["spec"]["runtimeRef"]["apiGroup"] = "example.com"
    await jobs.create(job)
    failed = await jobs.wait_condition("odd", "Failed", kind=TJ)
    assert _conditions(failed)[-1] == ("Failed", "True", "TrainingRuntimeNotSupported")


async def test_coscheduling_runs_as_a_native_gang(
    start_controller: Any, jobs: Jobs, custom: client.CustomObjectsApi, namespace: str
) -> None:
    await start_controller(gang_scheduler_name="kubernetes")
    runtime = training_runtime("gang", pod_annotations=HANG)
    runtime["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 30}}
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    node["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    await jobs.create(runtime)
    await jobs.create(trainjob("big", "gang", trainer={"numNodes": 3}))  # 24 GPUs; the cluster has 16
    pods = await jobs.wait_trainjob_pods("big", 3)
    assert all(p.spec.scheduling_group.pod_group_name == "big" for p in pods)
    group = await custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", "big"
    )
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    await asyncio.sleep(4)
    assert not any(p.spec.node_name for p in await jobs.trainjob_pods("big")), "part of the gang was placed"


async def test_kubectl_lists_trainjobs_and_runtimes_with_useful_columns(
    controller: Any, jobs: Jobs, kubectl: Kubectl, namespace: str
) -> None:
    runtime = training_runtime(f"listed-{namespace}", pod_annotations=runs_for("1s"))
    runtime["kind"] = "ClusterTrainingRuntime"
    kubectl("apply", "-f", "-", input=json.dumps(runtime))
    try:
        await jobs.create(
            trainjob(
                "shown", runtime["metadata"]["name"], kind="ClusterTrainingRuntime", trainer={"numNodes": 2}
            )
        )
        await jobs.wait_condition("shown", "Complete", kind=TJ)
        out = kubectl("get", "trainjob,clustertrainingruntime", "-A").stdout
        lines = out.splitlines()
        trainjob_header = next(line for line in lines if line.startswith("NAMESPACE"))
        assert trainjob_header.split() == [
            "NAMESPACE",
            "NAME",
            "STATE",
            "RUNTIME",
            "NODES",
            "PROGRESS",
            "ETA",
            "AGE",
        ]
        row = next(line for line in lines if "trainjob.trainer.kubeflow.org/shown" in line).split()
        assert row[2:5] == ["Complete", runtime["metadata"]["name"], "2"]
        runtime_row = next(
            line for line in lines if "clustertrainingruntime.trainer.kubeflow.org/listed-" in line
        )
        assert runtime_row.split()[1] == "torch"
    finally:
        kubectl("delete", "clustertrainingruntime", runtime["metadata"]["name"])


def _never_restarting(runtime: dict[str, Any], **job_spec: Any) -> dict[str, Any]:
    """The runtime's node Job with these Job spec fields, its pods restarting Never (as Kubernetes
    requires for podFailurePolicy and backoffLimitPerIndex)."""
    spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    spec.update(job_spec)
    spec["template"]["spec"]["restartPolicy"] = "Never"
    return runtime


async def _failed_condition(jobs: Jobs, name: str, timeout: float = 60) -> dict[str, Any]:
    job = await jobs.wait_condition(name, "Failed", kind=TJ, timeout=timeout)
    [failed] = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    return dict(failed)


async def test_a_pod_failure_policy_fail_job_rule_fails_the_trainjob_at_the_first_matching_failure(
    controller: Any, jobs: Jobs
) -> None:
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "In", "values": [42]}}
        ]
    }
    runtime = training_runtime("fatal", pod_annotations=fails(code=42, after="1s"), backoff_limit=5)
    await jobs.create(_never_restarting(runtime, podFailurePolicy=policy))
    await jobs.create(trainjob("fatal", "fatal", trainer={"numNodes": 2}))
    failed = await _failed_condition(jobs, "fatal")
    assert failed["reason"] == "FailedJobs"
    assert "(PodFailurePolicy: Container node for pod" in failed["message"]
    assert "failed with exit code 42 matching FailJob rule at index 0" in failed["message"]
    indexes = [
        p.metadata.labels["batch.kubernetes.io/job-completion-index"]
        for p in await jobs.trainjob_pods("fatal", live=False)
    ]
    assert len(indexes) == len(set(indexes)), "no pod was replaced: backoffLimit 5 did not apply"


async def test_an_ignored_pod_failure_is_replaced_without_counting_against_the_backoff_limit(
    controller: Any, jobs: Jobs
) -> None:
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}]}
    runtime = training_runtime("preempted", pod_annotations=fails(code=137, after="1s"), backoff_limit=0)
    await jobs.create(_never_restarting(runtime, podFailurePolicy=policy))
    await jobs.create(trainjob("preempted", "preempted", trainer={"numNodes": 1}))

    async def three_pods() -> list[client.V1Pod] | None:
        pods = await jobs.trainjob_pods("preempted", live=False)
        return pods if len(pods) >= 3 else None

    pods = await eventually(three_pods, timeout=60, what="three pods for index 0")
    assert len({p.metadata.name for p in pods}) == len(pods)
    counts = sorted(
        int(p.metadata.annotations["batch.kubernetes.io/job-index-ignored-failure-count"]) for p in pods
    )
    assert counts[:3] == [0, 1, 2], "each replacement carries the ignored failures before it"
    job = await jobs.get("preempted", TJ)
    assert job is not None and not (job.get("status") or {}).get("conditions"), (
        "backoffLimit 0 was not reached"
    )


async def test_backoff_limit_per_index_retries_each_index_then_fails_the_trainjob_with_failed_indexes(
    controller: Any, jobs: Jobs
) -> None:
    runtime = training_runtime("per-index", pod_annotations=fails(code=1, after="1s"))
    await jobs.create(_never_restarting(runtime, backoffLimitPerIndex=1))
    await jobs.create(trainjob("per-index", "per-index", trainer={"numNodes": 2}))
    failed = await _failed_condition(jobs, "per-index")
    assert failed["reason"] == "FailedJobs"
    assert "(FailedIndexes: indexes 0,1 failed, backoffLimitPerIndex 1)" in failed["message"]
    pods = await jobs.trainjob_pods("per-index", live=False)
    by_index = sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert by_index == ["0", "0", "1", "1"], "two tries per index, the Job-wide default of 6 left unused"
    job = await jobs.get("per-index", TJ)
    assert job is not None and job["status"]["failedIndexes"] == {"node-0": [0, 1]}


async def test_a_child_job_past_its_active_deadline_fails_the_trainjob(controller: Any, jobs: Jobs) -> None:
    runtime = training_runtime("slow", pod_annotations=HANG)
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"] = 3
    await jobs.create(runtime)
    await jobs.create(trainjob("slow", "slow", trainer={"numNodes": 1}))
    failed = await _failed_condition(jobs, "slow", timeout=30)
    assert "(DeadlineExceeded: active longer than activeDeadlineSeconds 3)" in failed["message"]
    assert not await jobs.trainjob_pods("slow"), "the running pod was stopped"


async def test_the_runtimes_jobset_ttl_deletes_the_pods_and_service_and_keeps_the_trainjob(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await jobs.create(training_runtime("brief", pod_annotations=runs_for("1s"), ttlSecondsAfterFinished=2))
    await jobs.create(trainjob("brief", "brief", trainer={"numNodes": 2}))
    await jobs.wait_condition("brief", "Complete", kind=TJ)

    async def gone() -> bool | None:
        pods = await jobs.trainjob_pods("brief", live=False)
        services = (await core.list_namespaced_service(namespace)).items
        return True if not pods and not any(s.metadata.name == "brief" for s in services) else None

    await eventually(gone, timeout=30, what="the TrainJob's pods and Service to be deleted by the JobSet TTL")
    job = await jobs.get("brief", TJ)
    assert job is not None and _conditions(job)[-1] == ("Complete", "True", "AllJobsCompleted")
