"""Convenience arguments become valid manifests; a bad argument is named before anything is submitted."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain import naming
from kubetrain.client import builders
from kubetrain.client.aio import validate
from kubetrain.client.builders import JobSpec
from kubetrain.client.errors import InvalidJobError


def spec(**overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "name": "mnist",
        "image": "example.com/train:1",
        "command": ["python", "train.py"],
    }
    values.update(overrides)
    return JobSpec(**values)


def test_a_pytorchjob_from_arguments_is_a_valid_manifest() -> None:
    body = builders.pytorchjob(
        spec(
            gpus=2,
            env={"EPOCHS": 3},
            checkpoint_dir="/ckpt",
            checkpoint_volume="pvc",
            ttl_seconds_after_finished=60,
            backoff_limit=3,
            clean_pod_policy="Running",
            scheduling={"min_available": 3},
        ),
        num_workers=2,
        nproc_per_node=2,
    )
    validate(body)
    replicas = body["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["env"] == [{"name": "EPOCHS", "value": "3"}]
    assert body["spec"]["runPolicy"] == {
        "ttlSecondsAfterFinished": 60,
        "backoffLimit": 3,
        "cleanPodPolicy": "Running",
        "schedulingPolicy": {"minAvailable": 3},
    }
    assert body["metadata"]["annotations"] == {
        "kubetrain.dev/checkpoint-dir": "/ckpt",
        "kubetrain.dev/checkpoint-volume": "pvc",
    }
    assert body["spec"]["nprocPerNode"] == "2"


def test_a_trainjob_from_arguments_is_a_valid_manifest() -> None:
    body = builders.trainjob(
        spec(
            gpus=1, ttl_seconds_after_finished=30, active_deadline_seconds=600, node_selector={"pool": "a100"}
        ),
        runtime="torch-distributed",
        num_nodes=2,
    )
    validate(body)
    trainer = body["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    assert body["spec"]["activeDeadlineSeconds"] == 600
    assert body["metadata"]["annotations"]["kubetrain.dev/ttl-seconds-after-finished"] == "30"
    patch = body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert patch["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a100"}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"name": "Bad_Name"}, "name must be a DNS-1035 label"),
        ({"image": ""}, "image is required"),
        ({"command": "python train.py"}, "command must be a list of strings"),
        ({"gpus": -1}, "gpus must be a whole number >= 0"),
        ({"backoff_limit": -2}, "backoff_limit must be a whole number >= 0"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds must be at least 1"),
        ({"stall_timeout_seconds": 0}, "stall_timeout_seconds must be at least 1"),
        ({"clean_pod_policy": "Sometimes"}, "clean_pod_policy must be one of None, Running, All"),
        ({"restart_policy": "Maybe"}, "restart_policy must be one of OnFailure"),
        ({"checkpoint_volume": "pvc"}, "checkpoint_volume needs checkpoint_dir"),
        ({"checkpoint_dir": "relative/path"}, "checkpoint_dir must be an absolute path"),
        ({"checkpoint_dir": "ftp://host/x"}, "checkpoint_dir must be an object-store URL of s3, gs"),
        ({"checkpoint_dir": "s3://"}, "the URL names no bucket"),
        (
            {"checkpoint_dir": "s3://b/p", "checkpoint_volume": "pvc"},
            "an object-store checkpoint_dir needs none",
        ),
        ({"checkpoint_secret": "s3"}, "checkpoint_secret needs checkpoint_dir"),
        ({"resources": {"cpu": "lots"}}, "resources.requests.cpu: 'lots' is not a Kubernetes quantity"),
        ({"scheduling": {"minAvailable": 2}}, "scheduling has unknown keys ['minAvailable']"),
    ],
)
def test_a_bad_argument_is_named(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidJobError, match=named.replace("[", r"\[").replace("]", r"\]")):
        builders.pytorchjob(spec(**overrides))


def test_an_object_store_location_and_its_secret_become_the_jobs_annotations() -> None:
    body = builders.pytorchjob(spec(checkpoint_dir="s3://bucket/runs", checkpoint_secret="s3"))
    annotations = body["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_CHECKPOINT_DIR] == "s3://bucket/runs"
    assert annotations[naming.ANNOTATION_CHECKPOINT_SECRET] == "s3"


def test_a_stall_timeout_becomes_the_jobs_annotation() -> None:
    body = builders.pytorchjob(spec(stall_timeout_seconds=600))
    assert body["metadata"]["annotations"][naming.ANNOTATION_STALL_TIMEOUT] == "600"
    assert naming.ANNOTATION_STALL_TIMEOUT not in builders.pytorchjob(spec())["metadata"]["annotations"]


def test_worker_count_and_runtime_are_checked() -> None:
    with pytest.raises(InvalidJobError, match="num_workers must be a whole number >= 0"):
        builders.pytorchjob(spec(), num_workers=-1)
    with pytest.raises(InvalidJobError, match="num_workers must be at least 1 when there is no Master"):
        builders.pytorchjob(spec(), num_workers=0, master=False)
    with pytest.raises(InvalidJobError, match="runtime is required"):
        builders.trainjob(spec(), runtime="")


def test_client_side_validation_names_the_field() -> None:
    body = builders.pytorchjob(spec())
    body["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Sometimes"
    with pytest.raises(InvalidJobError, match=r"spec\.pytorchReplicaSpecs\.Master\.restartPolicy"):
        validate(body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train_model", "train-model"),
        ("9lives", "job-9lives"),
        ("My.DAG/Task", "my-dag-task"),
    ],
)
def test_derived_names_are_dns_labels(text: str, expected: str) -> None:
    assert naming.dns_label(text) == expected


def test_long_derived_names_are_cut_with_a_hash_and_stay_distinct() -> None:
    a = naming.dns_label("x" * 80 + "a")
    b = naming.dns_label("x" * 80 + "b")
    assert len(a) <= naming.MAX_DERIVED_JOB_NAME and a != b
    assert naming.attempt_name("y" * 80, 12).endswith("-a12")
    assert len(naming.attempt_name("y" * 80, 12)) <= naming.MAX_DERIVED_JOB_NAME


def test_label_values_are_made_valid() -> None:
    assert naming.label_value("manual__2026-01-01T00:00:00+00:00") == "manual__2026-01-01T00_00_00_00_00"
    assert len(naming.label_value("z" * 100)) == 63


def test_queue_and_priority_become_kueues_labels_and_bad_names_are_refused() -> None:
    assert builders.queue_labels("team-a", "high") == {
        naming.LABEL_KUEUE_QUEUE_NAME: "team-a",
        naming.LABEL_KUEUE_PRIORITY_CLASS: "high",
    }
    assert builders.queue_labels(None, "") == {}
    with pytest.raises(InvalidJobError, match="queue_name must name a Kueue LocalQueue"):
        builders.queue_labels("Team A", None)
    with pytest.raises(InvalidJobError, match="priority_class must name a Kueue WorkloadPriorityClass"):
        builders.queue_labels("team-a", "x" * 64)
