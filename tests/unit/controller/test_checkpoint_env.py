"""The checkpoint env reaches every training container of both kinds, the job's lineage included.

The lineage (the ``kubetrain.dev/lineage`` label) is what keeps one lineage's attempts from fencing
off another's in a shared checkpoint directory, so a pod of a labelled job must get it, whether a
v1 job or a TrainJob built it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.controller.core import children
from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.trainjob import jobset
from kubetrain.controller.trainjob.indexedjob import ChildJob
from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.frameworks.base import job_info
from kubetrain.trainjob.build import build

RUNTIMES = Path(__file__).resolve().parents[3] / "deploy" / "runtimes"
OPTED_IN = {"kubetrain.dev/checkpoint-dir": "/checkpoints", "kubetrain.dev/attempt": "2"}


def metadata(labels: dict[str, str]) -> dict[str, Any]:
    return {"name": "digits", "namespace": "team", "uid": "u1", "labels": labels, "annotations": OPTED_IN}


def pytorchjob_pods(labels: dict[str, str]) -> list[dict[str, Any]]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata(labels),
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 1, "template": template},
            }
        },
    }
    info = job_info(job, frameworks.by_name("PyTorchJob"))
    return [children.build_pod(info, rtype, 0, [CheckpointPlugin()]) for rtype in ("Master", "Worker")]


def trainjob_pods(labels: dict[str, str]) -> list[dict[str, Any]]:
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata(labels),
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
    }
    info = build(job, yaml.safe_load((RUNTIMES / "torch-distributed.yaml").read_text()))
    [pod_set] = info.pod_sets
    return [
        jobset.build_pod(info, ChildJob(pod_set, 0), index, attempt=0, plugins=[CheckpointPlugin()])
        for index in range(2)
    ]


def checkpoint_env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("KUBETRAIN_")}


@pytest.mark.parametrize("pods", [pytorchjob_pods, trainjob_pods], ids=["PyTorchJob", "TrainJob"])
def test_every_pod_gets_the_jobs_lineage_beside_its_attempt(pods: Any) -> None:
    for pod in pods({"kubetrain.dev/lineage": "digits-trainjob-1a2b3c4d"}):
        assert checkpoint_env(pod) == {
            "KUBETRAIN_CHECKPOINT_DIR": "/checkpoints",
            "KUBETRAIN_RESUME_FROM": "",
            "KUBETRAIN_ATTEMPT": "2",
            "KUBETRAIN_LINEAGE": "digits-trainjob-1a2b3c4d",
        }


@pytest.mark.parametrize("pods", [pytorchjob_pods, trainjob_pods], ids=["PyTorchJob", "TrainJob"])
def test_a_job_without_a_lineage_label_gets_no_lineage(pods: Any) -> None:
    for pod in pods({"team": "vision"}):
        env = checkpoint_env(pod)
        assert env["KUBETRAIN_ATTEMPT"] == "2" and "KUBETRAIN_LINEAGE" not in env


def test_an_object_store_location_mounts_nothing_and_the_secret_reaches_every_container() -> None:
    template = {
        "spec": {"containers": [{"name": "pytorch", "image": "img"}, {"name": "side", "image": "img"}]}
    }
    annotations = {
        "kubetrain.dev/checkpoint-dir": "s3://bucket/runs/digits",
        "kubetrain.dev/checkpoint-secret": "s3",
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "digits", "namespace": "team", "uid": "u1", "annotations": annotations},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }
    info = job_info(job, frameworks.by_name("PyTorchJob"))
    pod = children.build_pod(info, "Master", 0, [CheckpointPlugin()])
    assert not any(v["name"] == "kubetrain-checkpoints" for v in pod["spec"].get("volumes") or [])
    for container in pod["spec"]["containers"]:
        assert not container.get("volumeMounts"), "a URL is not a mount path"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["KUBETRAIN_CHECKPOINT_DIR"] == "s3://bucket/runs/digits"
        assert container["envFrom"] == [{"secretRef": {"name": "s3"}}], "the Secret is referenced, not copied"
        assert "AWS_SECRET_ACCESS_KEY" not in env
