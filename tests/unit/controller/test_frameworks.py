"""The env every framework wires its replicas with (reference §2.4, §3; upstream unit tests 17-20, 60, 68, 69)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.frameworks.base import JobInfo, job_info


def _job(
    kind: str,
    field: str,
    replicas: dict[str, int],
    container: str,
    *,
    port: tuple[str, int] | None = None,
    **spec: Any,
) -> JobInfo:
    def template() -> dict[str, Any]:
        c: dict[str, Any] = {"name": container, "image": "img"}
        if port:
            c["ports"] = [{"name": port[0], "containerPort": port[1]}]
        return {"spec": {"containers": [c]}}

    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "job", "namespace": "ns", "uid": "u1"},
        "spec": {field: {t: {"replicas": n, "template": template()} for t, n in replicas.items()}, **spec},
    }
    return job_info(manifest, frameworks.by_name(kind))


def _env(info: JobInfo, rtype: str, index: int) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in info.framework.env(info, rtype, index)}


@pytest.mark.parametrize(
    ("kind", "field", "replicas", "container", "expected"),
    [
        pytest.param(
            "PyTorchJob",
            "pytorchReplicaSpecs",
            {"Master": 1, "Worker": 3},
            "pytorch",
            {
                "PYTHONUNBUFFERED": "1",
                "MASTER_PORT": "23456",
                "PET_MASTER_PORT": "23456",
                "MASTER_ADDR": "job-master-0",
                "PET_MASTER_ADDR": "job-master-0",
                "WORLD_SIZE": "4",
                "RANK": "2",
                "PET_NODE_RANK": "2",
                "PET_NPROC_PER_NODE": "auto",
                "PET_NNODES": "4",
            },
            id="pytorch-with-a-master",
        ),
        pytest.param(
            "XGBoostJob",
            "xgbReplicaSpecs",
            {"Master": 1, "Worker": 2},
            "xgboost",
            {
                "MASTER_PORT": "9999",
                "MASTER_ADDR": "job-master-0",
                "WORLD_SIZE": "3",
                "RANK": "2",  # the master counts in ranks and addresses
                "PYTHONUNBUFFERED": "1",
                "WORKER_PORT": "9999",
                "WORKER_ADDRS": "job-worker-0,job-worker-1",
            },
            id="xgboost",
        ),
        pytest.param(
            "JAXJob",
            "jaxReplicaSpecs",
            {"Worker": 2},
            "jax",
            {
                "PYTHONUNBUFFERED": "1",
                "COORDINATOR_PORT": "6666",
                "COORDINATOR_ADDRESS": "job-worker-0",
                "NUM_PROCESSES": "2",
                "PROCESS_ID": "1",
            },
            id="jax",
        ),
    ],
)
def test_the_second_workers_env_matches_upstream_in_order(
    kind: str, field: str, replicas: dict[str, int], container: str, expected: dict[str, str]
) -> None:
    info = _job(kind, field, replicas, container)
    assert info.framework.env(info, "Worker", 1) == [{"name": k, "value": v} for k, v in expected.items()]


def test_pytorch_world_size_multiplies_an_integer_nproc_per_node() -> None:
    info = _job("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1, "Worker": 1}, "pytorch", nprocPerNode="4")
    assert _env(info, "Master", 0)["WORLD_SIZE"] == "8"


def test_pytorch_elastic_env_matches_upstream() -> None:
    elastic = {
        "maxRestarts": 3,
        "rdzvBackend": "c10d",
        "rdzvHost": "localhost",
        "rdzvPort": 1234,
        "rdzvId": "rdzv-id",
        "minReplicas": 1,
        "maxReplicas": 3,
        "rdzvConf": [
            {"key": "rdzv-conf-name", "value": "rdzv-conf-value"},
            {"key": "rdzv-conf-name-1", "value": "rdzv-conf-value-1"},
        ],
    }
    info = _job("PyTorchJob", "pytorchReplicaSpecs", {"Worker": 1}, "pytorch", elasticPolicy=elastic)
    env = _env(info, "Worker", 0)
    assert {k: v for k, v in env.items() if k.startswith("PET_") and k != "PET_NPROC_PER_NODE"} == {
        "PET_MAX_RESTARTS": "3",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "localhost:1234",
        "PET_RDZV_ID": "rdzv-id",
        "PET_RDZV_CONF": "rdzv-conf-name=rdzv-conf-value,rdzv-conf-name-1=rdzv-conf-value-1",
        "PET_NNODES": "1:3",
    }


@pytest.mark.parametrize(
    ("elastic", "expected"),
    [
        ({}, (2, 2)),
        ({"minReplicas": 1, "maxReplicas": 3}, (1, 3)),
        ({"maxReplicas": 3}, (3, 3)),
        ({"minReplicas": 2}, (2, 2)),
    ],
)
def test_pytorch_elastic_min_and_max_default_from_each_other(
    elastic: dict[str, int], expected: tuple[int, int]
) -> None:
    info = _job("PyTorchJob", "pytorchReplicaSpecs", {"Worker": 2}, "pytorch", elasticPolicy=elastic)
    policy = info.spec["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == expected


def test_pytorch_nproc_defaults_to_auto_unless_elastic_sets_it() -> None:
    assert _job("PyTorchJob", "pytorchReplicaSpecs", {"Worker": 1}, "pytorch").spec["nprocPerNode"] == "auto"
    info = _job(
        "PyTorchJob", "pytorchReplicaSpecs", {"Worker": 1}, "pytorch", elasticPolicy={"nProcPerNode": 2}
    )
    assert "nprocPerNode" not in info.spec


def test_replica_type_keys_are_case_normalised_and_ordered() -> None:
    info = _job("PyTorchJob", "pytorchReplicaSpecs", {"worker": 1, "MASTER": 1}, "pytorch")
    assert list(info.replicas) == ["Master", "Worker"]
    assert info.replicas["Worker"].restart_policy == "OnFailure"


def test_tf_config_lists_every_replica_with_cluster_addresses() -> None:
    info = _job("TFJob", "tfReplicaSpecs", {"PS": 1, "Worker": 2}, "tensorflow")
    (env,) = info.framework.env(info, "Worker", 1)
    config = json.loads(env["value"])
    assert config == {
        "cluster": {
            "ps": ["job-ps-0.ns.svc:2222"],
            "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    assert list(config) == ["cluster", "task", "environment"]


def test_a_single_replica_tfjob_gets_no_tf_config() -> None:
    info = _job("TFJob", "tfReplicaSpecs", {"Worker": 1}, "tensorflow")
    assert info.framework.env(info, "Worker", 0) == []


def test_paddle_collective_mode_points_everyone_at_worker_zero() -> None:
    info = _job("PaddleJob", "paddleReplicaSpecs", {"Worker": 2}, "paddle")
    first = {e["name"]: e for e in info.framework.env(info, "Worker", 0)}
    assert first["PADDLE_MASTER"]["value"] == "$(POD_IP_DUMMY):36543"
    assert first["POD_IP_DUMMY"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert _env(info, "Worker", 1)["PADDLE_MASTER"] == "job-worker-0:36543"
    assert _env(info, "Worker", 1)["PADDLE_NNODES"] == "2"


def test_an_unknown_kind_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="unknown job kind 'MPIJob'"):
        frameworks.by_name("MPIJob")
