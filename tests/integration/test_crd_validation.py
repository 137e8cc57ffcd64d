"""The API server itself rejects bad jobs, with a message that names the field."""

from __future__ import annotations

import asyncio
import copy
import itertools
from typing import Any

import pytest
from kubernetes_asyncio import client

from kubetrain.controller.v1.frameworks import FRAMEWORKS
from kubetrain.controller.v1.frameworks.base import Framework, ReplicaCounts, job_info

pytestmark = pytest.mark.usefixtures("crds")


def _container(name: str = "pytorch") -> dict[str, Any]:
    return {"name": name, "image": "example.com/train:1"}


PYTORCHJOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "mnist"},
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [_container()]}},
            },
            "Worker": {
                "replicas": 2,
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [_container()]}},
            },
        }
    },
}


def _resource(body: dict[str, Any]) -> tuple[str, str, str]:
    group, version = body["apiVersion"].split("/")
    return group, version, body["kind"].lower() + "s"


async def _create(
    custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any], *, dry_run: bool = False
) -> str:
    """Create ``body`` (only validate it, with ``dry_run``); return the API server's error message, or ''
    when accepted."""
    group, version, plural = _resource(body)
    try:
        if dry_run:
            await custom.create_namespaced_custom_object(
                group, version, namespace, plural, body, dry_run="All"
            )
        else:
            await custom.create_namespaced_custom_object(group, version, namespace, plural, body)
    except client.ApiException as exc:
        assert exc.status == 422, exc.body
        return str(exc.body)
    return ""


async def _refused_patch(
    custom: client.CustomObjectsApi,
    namespace: str,
    job: dict[str, Any],
    patch: dict[str, Any],
    *,
    scale: bool = False,
) -> str:
    """The API server's message refusing a merge patch of the stored ``job`` (of its scale, with ``scale``)."""
    group, version, plural = _resource(job)
    write = custom.patch_namespaced_custom_object_scale if scale else custom.patch_namespaced_custom_object
    with pytest.raises(client.ApiException) as raised:
        await write(
            group,
            version,
            namespace,
            plural,
            job["metadata"]["name"],
            patch,
            _content_type="application/merge-patch+json",
        )
    return str(raised.value.body)


def _pytorchjob(name: str = "mnist", **edits: Any) -> dict[str, Any]:
    job = copy.deepcopy(PYTORCHJOB)
    job["metadata"]["name"] = name
    specs = job["spec"]["pytorchReplicaSpecs"]
    for path, value in edits.items():
        rtype, field = path.split("__")
        specs[rtype][field] = value
    return job


def _v1_job(framework: Framework, counts: dict[str, int], name: str = "job") -> dict[str, Any]:
    """A job of ``framework``'s kind with so many replicas of each type (as ``counts`` lists them)."""
    replica = {"template": {"spec": {"containers": [_container(framework.api.default_container)]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": framework.api.kind,
        "metadata": {"name": name},
        "spec": {framework.api.replica_field: {t: {**replica, "replicas": n} for t, n in counts.items()}},
    }


async def test_a_valid_pytorchjob_is_accepted(custom: client.CustomObjectsApi, namespace: str) -> None:
    assert await _create(custom, namespace, _pytorchjob()) == ""


async def test_negative_replicas_are_rejected(custom: client.CustomObjectsApi, namespace: str) -> None:
    message = await _create(custom, namespace, _pytorchjob(Worker__replicas=-1))
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in message


async def test_a_replica_without_containers_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    message = await _create(custom, namespace, _pytorchjob(Worker__template={"spec": {"containers": []}}))
    assert "spec.pytorchReplicaSpecs[*].template.spec.containers must list at least one container" in message


async def test_an_unknown_restart_policy_is_rejected(custom: client.CustomObjectsApi, namespace: str) -> None:
    message = await _create(custom, namespace, _pytorchjob(Master__restartPolicy="Sometimes"))
    assert "spec.pytorchReplicaSpecs.Master.restartPolicy" in message
    assert "Unsupported value" in message and "ExitCode" in message


async def test_two_masters_are_rejected(custom: client.CustomObjectsApi, namespace: str) -> None:
    message = await _create(custom, namespace, _pytorchjob(Master__replicas=2))
    assert "spec.pytorchReplicaSpecs[Master].replicas must be 1" in message


async def test_a_missing_pytorch_container_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    message = await _create(
        custom, namespace, _pytorchjob(Worker__template={"spec": {"containers": [_container("main")]}})
    )
    assert "must include a container named pytorch" in message


async def test_a_misspelled_replica_type_is_rejected(custom: client.CustomObjectsApi, namespace: str) -> None:
    job = _pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["worker"] = job["spec"]["pytorchReplicaSpecs"].pop("Worker")
    message = await _create(custom, namespace, job)
    assert "spec.pytorchReplicaSpecs keys must be one of Master, Worker" in message


async def test_a_name_that_is_not_a_dns_label_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    message = await _create(custom, namespace, _pytorchjob("9lives"))
    assert "metadata.name must be a DNS-1035 label" in message


async def test_an_unknown_managed_by_is_rejected(custom: client.CustomObjectsApi, namespace: str) -> None:
    job = _pytorchjob()
    job["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/other-controller"}
    message = await _create(custom, namespace, job)
    assert "spec.runPolicy.managedBy must be one of" in message


async def test_the_scheduling_queue_is_immutable(custom: client.CustomObjectsApi, namespace: str) -> None:
    job = _pytorchjob()
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "a"}}
    assert await _create(custom, namespace, job) == ""
    patch = {"spec": {"runPolicy": {"schedulingPolicy": {"queue": "b"}}}}
    message = await _refused_patch(custom, namespace, job, patch)
    assert "spec.runPolicy.schedulingPolicy.queue is immutable" in message


async def test_a_tfjob_with_chief_and_master_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = _v1_job(FRAMEWORKS["tfjob"], {"Chief": 1, "Master": 1}, "tf")
    assert "must not have more than 1 Chief or Master role" in await _create(custom, namespace, job)


TRAINJOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "llm"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
}


async def test_a_valid_trainjob_is_accepted_and_defaulted(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert await _create(custom, namespace, copy.deepcopy(TRAINJOB)) == ""
    stored = await custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "llm"
    )
    assert stored["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }


async def test_a_trainjob_setting_reserved_env_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = copy.deepcopy(TRAINJOB)
    job["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "4"}]
    message = await _create(custom, namespace, job)
    assert "spec.trainer.env must not set reserved names" in message


async def test_a_trainjob_with_an_unknown_runtime_kind_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = copy.deepcopy(TRAINJOB)
    job["spec"]["runtimeRef"]["kind"] = "Deployment"
    message = await _create(custom, namespace, job)
    assert "spec.runtimeRef.kind" in message and "ClusterTrainingRuntime" in message


async def test_a_trainjob_runtime_ref_is_immutable(custom: client.CustomObjectsApi, namespace: str) -> None:
    assert await _create(custom, namespace, copy.deepcopy(TRAINJOB)) == ""
    message = await _refused_patch(custom, namespace, TRAINJOB, {"spec": {"runtimeRef": {"name": "other"}}})
    assert "spec.runtimeRef is immutable" in message


async def test_runtime_patches_change_only_while_the_trainjob_is_suspended(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert await _create(custom, namespace, copy.deepcopy(TRAINJOB)) == ""
    patches = [
        {
            "manager": "example.com/m",
            "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "b"}}}},
        }
    ]

    async def patch(spec: dict[str, Any]) -> None:
        await custom.patch_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "llm", {"spec": spec},
            _content_type="application/merge-patch+json",
        )  # fmt: skip

    with pytest.raises(client.ApiException) as raised:
        await patch({"runtimePatches": patches})
    assert (
        "spec.runtimePatches and spec.podTemplateOverrides may change only while the TrainJob is suspended"
        in (raised.value.body)
    )
    await patch({"runtimePatches": patches, "suspend": True})  # Kueue's way: in the update that suspends
    await patch({"runtimePatches": [], "suspend": False})  # or in the one that resumes


async def test_kubectl_get_kubeflow_lists_every_job_kind(
    kubectl: Any, custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert await _create(custom, namespace, _pytorchjob()) == ""
    assert await _create(custom, namespace, copy.deepcopy(TRAINJOB)) == ""
    listed = kubectl("get", "kubeflow", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(listed) == ["pytorchjob.kubeflow.org/mnist", "trainjob.trainer.kubeflow.org/llm"]


# -- replica counts the controller's success rule cannot live with ---------------------------------------


def _cannot_end_well(framework: Framework, counts: dict[str, int]) -> bool:
    """Whether the controller would call this job Succeeded with no pod at all, or never, even once
    every pod succeeded: its own ``succeeded()`` decides, so the test follows the controller."""
    job = _v1_job(framework, counts)
    job["metadata"].update(namespace="team", uid="uid")
    info = job_info(job, framework)
    without_pods = framework.succeeded(info, {}, {})
    done = {t: ReplicaCounts(succeeded=n) for t, n in counts.items()}
    pods = {(t, i): {"status": {"phase": "Succeeded"}} for t, n in counts.items() for i in range(n)}
    return without_pods or not framework.succeeded(info, done, pods)


def _replica_layouts(framework: Framework) -> list[dict[str, int]]:
    """Every layout of the kind's replica types, each absent, with 0 or with 1 replica."""
    choices = itertools.product((None, 0, 1), repeat=len(framework.api.replica_types))
    return [
        {t: n for t, n in zip(framework.api.replica_types, choice, strict=True) if n is not None}
        for choice in choices
    ]


@pytest.mark.parametrize("kind", sorted(FRAMEWORKS))
async def test_a_job_the_controller_would_finish_without_running_or_never_finish_is_rejected(
    kind: str, custom: client.CustomObjectsApi, namespace: str
) -> None:
    framework = FRAMEWORKS[kind]
    doomed = [layout for layout in _replica_layouts(framework) if _cannot_end_well(framework, layout)]
    assert doomed  # replicas: 0 on the replica type that decides success is always among them
    answers = await asyncio.gather(
        *(_create(custom, namespace, _v1_job(framework, layout), dry_run=True) for layout in doomed)
    )
    accepted = [layout for layout, message in zip(doomed, answers, strict=True) if not message]
    assert not accepted, f"{framework.api.kind} accepts replica layouts that can never end well: {accepted}"
    assert all(f"spec.{framework.api.replica_field}" in message for message in answers)


@pytest.mark.parametrize(
    ("kind", "layout"),
    [
        ("pytorchjob", {"Master": 1}),
        ("tfjob", {"Chief": 1, "Worker": 0}),
        ("tfjob", {"PS": 1, "Worker": 2}),
        ("xgboostjob", {"Master": 1, "Worker": 0}),
        ("paddlejob", {"Master": 1, "Worker": 0}),
        ("paddlejob", {"Worker": 3}),
        ("jaxjob", {"Worker": 1}),
    ],
)
async def test_replica_types_that_do_not_decide_success_may_be_empty(
    kind: str, layout: dict[str, int], custom: client.CustomObjectsApi, namespace: str
) -> None:
    framework = FRAMEWORKS[kind]
    assert not _cannot_end_well(framework, layout)
    assert await _create(custom, namespace, _v1_job(framework, layout), dry_run=True) == ""


async def test_zero_chief_replicas_are_rejected_naming_the_field(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    message = await _create(custom, namespace, _v1_job(FRAMEWORKS["tfjob"], {"Chief": 0, "Worker": 2}))
    assert "spec.tfReplicaSpecs[Chief/Master].replicas must be 1" in message


# -- names whose children cannot exist -----------------------------------------------------------------


async def test_a_name_too_long_for_the_jobs_services_is_rejected_with_the_longest_allowed_name(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = _pytorchjob(
        "n" * 53, Worker__replicas=200
    )  # the last Service: <name>-worker-199, 11 characters more
    message = await _create(custom, namespace, job)
    assert "metadata.name is too long for this job" in message
    assert "use a name of at most 52 characters" in message
    job["metadata"]["name"] = "n" * 52
    assert await _create(custom, namespace, job, dry_run=True) == ""


async def test_the_replica_count_bounds_the_name_through_the_index_digits(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = _pytorchjob("n" * 54, Worker__replicas=10)  # n...n-worker-9 is 63 characters
    assert await _create(custom, namespace, job, dry_run=True) == ""
    job = _pytorchjob("n" * 54, Worker__replicas=11)
    assert "use a name of at most 53 characters" in await _create(custom, namespace, job)


async def test_a_replica_type_with_no_replicas_has_no_service_to_fit(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    # n...n-chief-0 fits; n...n-evaluator-0 would not
    job = _v1_job(FRAMEWORKS["tfjob"], {"Chief": 1, "Evaluator": 0}, "n" * 55)
    assert await _create(custom, namespace, job, dry_run=True) == ""
    job["spec"]["tfReplicaSpecs"]["Evaluator"]["replicas"] = 1
    assert "use a name of at most 51 characters" in await _create(custom, namespace, job)


async def test_scaling_past_what_the_name_allows_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = _pytorchjob("n" * 54, Worker__replicas=10)
    assert await _create(custom, namespace, job) == ""
    message = await _refused_patch(custom, namespace, job, {"spec": {"replicas": 11}}, scale=True)
    assert "use a name of at most 53 characters" in message


async def test_a_trainjob_name_no_runtime_could_run_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = copy.deepcopy(TRAINJOB)
    job["metadata"]["name"] = "t" * 58
    assert "metadata.name must be at most 57 characters" in await _create(custom, namespace, job)
    job["metadata"]["name"] = "t" * 57
    assert await _create(custom, namespace, job, dry_run=True) == ""


# -- upper bounds ---------------------------------------------------------------------------------------


async def test_more_than_10000_replicas_of_one_type_are_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    message = await _create(custom, namespace, _pytorchjob(Worker__replicas=10001))
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in message and "10000" in message
    assert await _create(custom, namespace, _pytorchjob(Worker__replicas=10000), dry_run=True) == ""


async def test_more_than_10000_trainjob_nodes_are_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    job = copy.deepcopy(TRAINJOB)
    job["spec"]["trainer"]["numNodes"] = 10001
    message = await _create(custom, namespace, job)
    assert "spec.trainer.numNodes" in message and "10000" in message


def _runtime(*jobs: dict[str, Any], **jobset: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {"template": {"spec": {"replicatedJobs": list(jobs), **jobset}}},
    }


def _replicated_job(name: str, **fields: Any) -> dict[str, Any]:
    pod = {"spec": {"containers": [_container("node")]}}
    return {"name": name, "template": {"spec": {"template": pod}}, **fields}


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        (
            _runtime(_replicated_job("node", replicas=200, template={"spec": {"parallelism": 100}})),
            "at most 10000 pods per replicated job",
        ),
        (_runtime(_replicated_job("Node")), "spec.template.spec.replicatedJobs[0].name"),
        (
            _runtime(_replicated_job("node"), _replicated_job("node")),
            "spec.template.spec.replicatedJobs[*].name must be unique",
        ),
        (
            _runtime(
                _replicated_job("init"),
                _replicated_job("node", dependsOn=[{"name": "dataset", "status": "Complete"}]),
            ),
            "spec.template.spec.replicatedJobs[*].dependsOn must name another replicated job",
        ),
        (
            _runtime(
                _replicated_job("node"), successPolicy={"operator": "All", "targetReplicatedJobs": ["nod"]}
            ),
            "spec.template.spec.successPolicy.targetReplicatedJobs must name replicated jobs of this runtime",
        ),
    ],
    ids=["pods-over-max", "name-not-a-dns-label", "duplicate-names", "depends-on-unknown", "success-unknown"],
)
async def test_a_runtime_whose_jobs_could_never_run_or_end_is_rejected(
    runtime: dict[str, Any], message: str, custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert message in await _create(custom, namespace, runtime)


def _job_spec(**fields: Any) -> dict[str, Any]:
    """The node replicated job with these Job spec fields (its pods restart Never)."""
    pod = {"spec": {"restartPolicy": "Never", "containers": [_container("node")]}}
    return {"name": "node", "template": {"spec": {"template": pod, **fields}}}


def _trainer_job(**fields: Any) -> dict[str, Any]:
    job = _replicated_job("node", **fields)
    job["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    return job


FAIL_ON_42 = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        (
            _runtime(_job_spec(ttlSecondsAfterFinished=60)),
            "template.spec.ttlSecondsAfterFinished is not supported",
        ),
        (_runtime(_job_spec(successPolicy={"rules": []})), "template.spec.successPolicy is not supported"),
        (_runtime(_job_spec(suspend=True)), "template.spec.suspend is not supported"),
        (_runtime(_job_spec(manualSelector=True)), "template.spec.manualSelector is not supported"),
        (
            _runtime(_job_spec(selector={"matchLabels": {"a": "b"}})),
            "template.spec.selector is not supported",
        ),
        (_runtime(_job_spec(managedBy="example.com/x")), "template.spec.managedBy is not supported"),
        (_runtime(_job_spec(completionMode="NonIndexed")), "template.spec.completionMode must be Indexed"),
        (
            _runtime(_job_spec(podReplacementPolicy="TerminatingOrFailed")),
            "template.spec.podReplacementPolicy must be Failed",
        ),
        (
            _runtime(_replicated_job("node"), managedBy="example.com/x"),
            "spec.template.spec.managedBy is not supported",
        ),
        (_runtime(_replicated_job("node"), suspend=True), "spec.template.spec.suspend cannot be true"),
        (
            _runtime(_replicated_job("node"), failurePolicy={"restartStrategy": "InPlaceRestart"}),
            "restartStrategy InPlaceRestart is not supported",
        ),
        (
            _runtime(_replicated_job("node"), coordinator={"replicatedJob": "launcher"}),
            "spec.template.spec.coordinator.replicatedJob must name a replicated job",
        ),
        (
            _runtime(
                _replicated_job("node"),
                failurePolicy={
                    "rules": [{"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["Oops"]}]
                },
            ),
            "onJobFailureReasons[0]",
        ),
        (_runtime(_replicated_job("node", groupName="Bad_Group")), "groupName"),
        (_runtime(_trainer_job(replicas=2)), "replicas must be 1 for a replicated job labelled"),
    ],
    ids=[
        "job-ttl",
        "job-success-policy",
        "job-suspend",
        "job-manual-selector",
        "job-selector",
        "job-managed-by",
        "job-non-indexed",
        "job-replace-terminating",
        "jobset-managed-by",
        "jobset-suspend",
        "jobset-in-place-restart",
        "coordinator-unknown-job",
        "failure-reason-unknown",
        "group-name-not-a-label",
        "trainer-replicas",
    ],
)
async def test_a_jobset_or_job_field_kubetrain_does_not_carry_out_is_refused_naming_it(
    runtime: dict[str, Any], message: str, custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert message in await _create(custom, namespace, runtime, dry_run=True)


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            {
                "name": "node",
                "template": {
                    "spec": {
                        "podFailurePolicy": FAIL_ON_42,
                        "template": {"spec": {"containers": [_container("node")]}},
                    }
                },
            },
            "podFailurePolicy needs the pod template's restartPolicy to be Never",
        ),
        (
            {
                "name": "node",
                "template": {
                    "spec": {
                        "backoffLimitPerIndex": 1,
                        "template": {"spec": {"containers": [_container("node")]}},
                    }
                },
            },
            "backoffLimitPerIndex needs the pod template's restartPolicy to be Never",
        ),
        (_job_spec(maxFailedIndexes=1), "maxFailedIndexes needs backoffLimitPerIndex"),
        (
            _job_spec(
                podFailurePolicy={
                    "rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}]
                }
            ),
            "the FailIndex action needs backoffLimitPerIndex",
        ),
        (
            _job_spec(
                podFailurePolicy={
                    "rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [0]}}]
                }
            ),
            "must not contain 0 with operator In",
        ),
        (
            _job_spec(podFailurePolicy={"rules": [{"action": "Ignore"}]}),
            "must set exactly one of onExitCodes, onPodConditions",
        ),
    ],
    ids=[
        "pfp-on-failure",
        "per-index-on-failure",
        "max-failed-alone",
        "fail-index-alone",
        "exit-code-zero",
        "rule-empty",
    ],
)
async def test_a_pod_failure_policy_or_per_index_limit_a_job_could_not_honour_is_refused(
    job: dict[str, Any], message: str, custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert message in await _create(custom, namespace, _runtime(job), dry_run=True)


async def test_the_pod_failure_policy_and_per_index_limits_are_kept(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    spec = {
        "podFailurePolicy": FAIL_ON_42,
        "backoffLimitPerIndex": 1,
        "maxFailedIndexes": 2,
        "activeDeadlineSeconds": 60,
    }
    runtime = _runtime(_job_spec(**spec), ttlSecondsAfterFinished=30, coordinator={"replicatedJob": "node"})
    assert await _create(custom, namespace, runtime) == ""
    stored = await custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", "rt"
    )
    job_spec = stored["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert {k: job_spec[k] for k in spec} == spec, "nothing pruned"


@pytest.mark.parametrize(
    ("ml_policy", "message"),
    [
        ({"flux": {}}, "spec.mlPolicy.flux is not supported"),
        (
            {"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["node"]}]}}},
            "must not include node",
        ),
    ],
    ids=["flux", "env-injection-node"],
)
async def test_an_ml_policy_kubetrain_cannot_carry_out_is_refused(
    ml_policy: dict[str, Any], message: str, custom: client.CustomObjectsApi, namespace: str
) -> None:
    runtime = _runtime(_replicated_job("node"))
    runtime["spec"]["mlPolicy"] = ml_policy
    assert message in await _create(custom, namespace, runtime, dry_run=True)
