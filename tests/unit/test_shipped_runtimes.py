"""The shipped runtimes behave as upstream's: the trainer has no command of its own, except torchtune's.

Upstream's built-in runtimes leave the trainer's command to the TrainJob (the SDK's CustomTrainer
writes ``torchrun ...``, ``mpirun ...``); a TrainJob that gives only an image
(``CustomTrainerContainer``) runs the image's entrypoint. A command in the runtime would run instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.trainjob.build import build

RUNTIMES = Path(__file__).resolve().parents[2] / "deploy" / "runtimes"
SHIPPED = sorted(p.stem for p in RUNTIMES.glob("*.yaml") if p.stem != "kustomization")
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"  # upstream's label, not one of ours


def runtime(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((RUNTIMES / f"{name}.yaml").read_text())
    return loaded


def trainer_container(runtime_spec: dict[str, Any]) -> dict[str, Any]:
    (step,) = [
        job
        for job in runtime_spec["spec"]["template"]["spec"]["replicatedJobs"]
        if (job["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer"
    ]
    (node,) = [c for c in step["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "node"]
    return dict(node)


@pytest.mark.parametrize("name", [n for n in SHIPPED if not n.startswith("torchtune-")])
def test_the_trainer_of_a_shipped_runtime_has_no_command_of_its_own(name: str) -> None:
    node = trainer_container(runtime(name))
    assert "command" not in node and "args" not in node, f"{name}: {node.get('command')}"


@pytest.mark.parametrize("name", ["torch-distributed", "jax-distributed", "xgboost-distributed"])
def test_a_trainjob_that_gives_only_an_image_runs_its_entrypoint(name: str) -> None:
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "image-only", "namespace": "team", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": name}, "trainer": {"image": "registry.example.com/train:1"}},
    }
    trainer = build(job, runtime(name)).trainer()
    assert trainer is not None
    node = trainer.container("node")
    assert node is not None and node["image"] == "registry.example.com/train:1"
    assert "command" not in node and "args" not in node
