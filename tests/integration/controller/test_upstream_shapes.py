"""Upstream manifests and tools that lean on details of upstream's CRDs: TFJob replica keys in lower case,
and ``kubectl scale`` on PaddleJob and JAXJob (their CRDs' scale subresource, which an HPA uses too)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubetrain.api import kinds
from tests.conftest import Kubectl
from tests.support import HANG, Jobs, eventually


def _v1_job(kind: kinds.V1Kind, name: str, replicas: dict[str, int]) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        container = {"name": kind.default_container, "image": "example.com/train:1"}
        return {
            "replicas": count,
            "template": {"metadata": {"annotations": dict(HANG)}, "spec": {"containers": [container]}},
        }

    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": name},
        "spec": {kind.replica_field: {rtype: replica(n) for rtype, n in replicas.items()}},
    }


async def test_a_tfjob_with_lower_case_replica_keys_runs_as_upstreams_does(
    controller: Any, jobs: Jobs
) -> None:
    await jobs.create(_v1_job(kinds.TFJOB, "lower", {"ps": 1, "worker": 2}))
    pods = await jobs.wait_pods("lower", 3)
    assert sorted(p.metadata.name for p in pods) == ["lower-ps-0", "lower-worker-0", "lower-worker-1"]
    worker = next(p for p in pods if p.metadata.name == "lower-worker-1")
    config = json.loads(next(e.value for e in worker.spec.containers[0].env if e.name == "TF_CONFIG"))
    assert sorted(config["cluster"]) == ["ps", "worker"] and config["task"] == {"type": "worker", "index": 1}


async def test_a_tfjob_naming_one_replica_type_in_two_cases_is_refused(jobs: Jobs, crds: None) -> None:
    job = _v1_job(kinds.TFJOB, "twice", {"Worker": 1, "worker": 1})
    with pytest.raises(Exception, match="names a replica type twice, spelled in two cases"):
        await jobs.create(job)


@pytest.mark.parametrize("kind", [kinds.PADDLEJOB, kinds.JAXJOB], ids=lambda k: k.kind)
async def test_kubectl_scale_resizes_the_workers(
    kind: kinds.V1Kind, controller: Any, jobs: Jobs, kubectl: Kubectl, namespace: str
) -> None:
    name = f"scaled-{kind.singular}"
    await jobs.create(_v1_job(kind, name, {"Worker": 1}))
    await jobs.wait_pods(name, 1)
    kubectl("scale", "-n", namespace, f"{kind.plural}/{name}", "--replicas=3")
    pods = await jobs.wait_pods(name, 3)
    assert sorted(p.metadata.name for p in pods) == [f"{name}-worker-{i}" for i in range(3)]

    async def scale_with_selector() -> dict[str, Any] | None:
        command = ("get", "-n", namespace, f"{kind.plural}/{name}", "--subresource=scale", "-o", "json")
        scale: dict[str, Any] = json.loads(kubectl(*command).stdout)
        return scale if "selector" in scale.get("status", {}) else None

    # The replica counts (and their selector) are progress: written within a second (job-lifecycle.md).
    scale = await eventually(scale_with_selector, timeout=10, what="the scale subresource's selector")
    assert scale["spec"]["replicas"] == 3
    assert scale["status"]["selector"].startswith("training.kubeflow.org/job-name=")
