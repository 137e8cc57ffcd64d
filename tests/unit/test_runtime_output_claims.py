"""The shipped runtimes keep what training produced: an output claim is never deleted with its TrainJob.

A TrainJob is deleted on purpose and often: by its TTL, by an Airflow task (``on_finish_action``,
``on_kill``), by a KFP cancel. A ``volumeClaimPolicies`` claim with ``whenDeleted: Delete`` (the default)
goes with it, so a model written there is lost while the task's result still points at it. The claims
are resolved here by the controller's own build of a TrainJob on each runtime, as it creates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.kube.resources import PVCS
from kubetrain.trainjob.build import build
from kubetrain.trainjob.state import TrainJobInfo

RUNTIMES = Path(__file__).resolve().parents[2] / "deploy" / "runtimes"
SHIPPED = sorted(p.stem for p in RUNTIMES.glob("*.yaml") if p.stem != "kustomization")
TORCHTUNE = [name for name in SHIPPED if name.startswith("torchtune-")]


# The kubeflow SDK's BuiltinTrainer(TorchTuneConfig()): the controller completes the command.
SDK_TRAINER = {"command": ["tune", "run"], "args": []}


def resolved(runtime_name: str, trainer: dict[str, Any] | None = None) -> TrainJobInfo:
    runtime: dict[str, Any] = yaml.safe_load((RUNTIMES / f"{runtime_name}.yaml").read_text())
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tune", "namespace": "team", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": runtime_name}, **({"trainer": trainer} if trainer else {})},
    }
    return build(job, runtime)


def owned_claims(info: TrainJobInfo) -> dict[str, bool]:
    """Each claim the TrainJob gets, and whether deleting the TrainJob deletes it."""
    return {
        extra.name: bool(extra.make()["metadata"].get("ownerReferences"))
        for extra in info.extras
        if extra.resource is PVCS
    }


def trainer_mounts(info: TrainJobInfo) -> dict[str, str]:
    """mount path -> claim, in the trainer's ``node`` container."""
    trainer = info.trainer()
    assert trainer is not None
    spec = trainer.template["spec"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in spec.get("volumes") or []
        if "persistentVolumeClaim" in v
    }
    node = trainer.container("node")
    assert node is not None
    return {m["mountPath"]: claims[m["name"]] for m in node.get("volumeMounts") or [] if m["name"] in claims}


def claim_of(path: str, mounts: dict[str, str]) -> str:
    inside = [p for p in mounts if path == p or path.startswith(p.rstrip("/") + "/")]
    assert inside, f"{path} is on no claim"
    return mounts[max(inside, key=len)]


def words(info: TrainJobInfo) -> list[str]:
    """The trainer's command line: command and args."""
    trainer = info.trainer()
    assert trainer is not None
    node = trainer.container("node")
    assert node is not None
    return [str(w) for w in [*(node.get("command") or []), *(node.get("args") or [])]]


def output_dir(info: TrainJobInfo) -> str:
    (value,) = [w.removeprefix("output_dir=") for w in words(info) if w.startswith("output_dir=")]
    return value


def test_the_torchtune_runtimes_are_shipped() -> None:
    assert TORCHTUNE == ["torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"]


@pytest.mark.parametrize("trainer", [None, SDK_TRAINER], ids=["runtime-command", "sdk-builtin-trainer"])
@pytest.mark.parametrize("runtime_name", TORCHTUNE)
def test_the_fine_tuned_model_lands_on_a_claim_that_outlives_the_trainjob(
    runtime_name: str, trainer: dict[str, Any] | None
) -> None:
    info = resolved(runtime_name, trainer)
    claim = claim_of(output_dir(info), trainer_mounts(info))
    assert claim == "output-tune"
    assert owned_claims(info)[claim] is False, f"{runtime_name}: deleting the TrainJob would delete {claim}"


@pytest.mark.parametrize("runtime_name", TORCHTUNE)
def test_only_the_output_is_retained_the_downloads_go_with_the_trainjob(runtime_name: str) -> None:
    # The data set and the model are downloaded again by the next TrainJob: keeping them would leave
    # 20Gi behind per run.
    info = resolved(runtime_name)
    assert owned_claims(info) == {"initializer-tune": True, "output-tune": False}
    mounts = trainer_mounts(info)
    assert claim_of("/workspace/model/config.json", mounts) == "initializer-tune"


@pytest.mark.parametrize("runtime_name", SHIPPED)
def test_no_shipped_runtime_writes_its_output_to_a_claim_deleted_with_the_trainjob(runtime_name: str) -> None:
    info = resolved(runtime_name)
    writes_output = any(w.startswith("output_dir=") for w in words(info))
    if writes_output:
        assert owned_claims(info)[claim_of(output_dir(info), trainer_mounts(info))] is False
    else:  # the runtimes that write nowhere on a claim give the TrainJob no claim at all
        assert owned_claims(info) == {}
