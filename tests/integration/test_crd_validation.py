"""The API server itself rejects bad jobs, with a message that names the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client

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


async def _create(custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> str:
    """Create ``body``; return the API server's error message, or '' when accepted."""
    group, version = body["apiVersion"].split("/")
    plural = {"PyTorchJob": "pytorchjobs", "TrainJob": "trainjobs", "TFJob": "tfjobs"}[body["kind"]]
    try:
        await custom.create_namespaced_custom_object(group, version, namespace, plural, body)
    except client.ApiException as exc:
        assert exc.status == 422, exc.body
        return str(exc.body)
    return ""


def _pytorchjob(**edits: Any) -> dict[str, Any]:
    job = copy.deepcopy(PYTORCHJOB)
    specs = job["spec"]["pytorchReplicaSpecs"]
    for path, value in edits.items():
        rtype, field = path.split("__")
        specs[rtype][field] = value
    return job


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
    job = _pytorchjob()
    job["metadata"]["name"] = "9lives"
    message = await _create(custom, namespace, job)
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
    with pytest.raises(client.ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            namespace,
            "pytorchjobs",
            "mnist",
            patch,
            _content_type="application/merge-patch+json",
        )
    assert "spec.runPolicy.schedulingPolicy.queue is immutable" in raised.value.body


async def test_a_tfjob_with_chief_and_master_is_rejected(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    replica = {"replicas": 1, "template": {"spec": {"containers": [_container("tensorflow")]}}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf"},
        "spec": {"tfReplicaSpecs": {"Chief": replica, "Master": replica}},
    }
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
    with pytest.raises(client.ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            "trainer.kubeflow.org",
            "v1alpha1",
            namespace,
            "trainjobs",
            "llm",
            {"spec": {"runtimeRef": {"name": "other"}}},
            _content_type="application/merge-patch+json",
        )
    assert "spec.runtimeRef is immutable" in raised.value.body


async def test_kubectl_get_kubeflow_lists_every_job_kind(
    kubectl: Any, custom: client.CustomObjectsApi, namespace: str
) -> None:
    assert await _create(custom, namespace, _pytorchjob()) == ""
    assert await _create(custom, namespace, copy.deepcopy(TRAINJOB)) == ""
    listed = kubectl("get", "kubeflow", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(listed) == ["pytorchjob.kubeflow.org/mnist", "trainjob.trainer.kubeflow.org/llm"]
