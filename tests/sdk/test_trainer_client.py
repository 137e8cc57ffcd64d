"""kubeflow's ``TrainerClient`` (the Kubeflow Trainer v2 SDK), unchanged, against kubetrain's controller:
it connects without a warning, lists the shipped runtimes, and a ``CustomTrainer`` trains for real on
the process node."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import CustomTrainer, TrainerClient
from kubeflow.trainer.types.types import TrainerType

from tests.docs_commands import REPO

pytestmark = pytest.mark.usefixtures("sdk_cluster", "controller_process")


def shipped_runtimes() -> dict[str, str]:
    """name -> framework label of every runtime in deploy/runtimes."""
    kustomization = yaml.safe_load((REPO / "deploy" / "runtimes" / "kustomization.yaml").read_text())
    runtimes = [
        yaml.safe_load((REPO / "deploy" / "runtimes" / name).read_text())
        for name in kustomization["resources"]
    ]
    return {
        r["metadata"]["name"]: r["metadata"]["labels"]["trainer.kubeflow.org/framework"] for r in runtimes
    }


def all_reduce_then_write(go, out):  # type: ignore[no-untyped-def]
    # The SDK sends this function's text to the pods in an unquoted shell here-document: imports
    # inside, no annotations, no dollar signs or backquotes.
    import os
    import pathlib
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.tensor([rank + 1])
    dist.all_reduce(total)
    print(f"rank {rank} of {dist.get_world_size()} on node {os.environ['PET_NODE_RANK']}: sum {int(total)}")
    deadline = time.monotonic() + 300
    while not pathlib.Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    pathlib.Path(out, f"rank-{rank}").write_text(str(int(total)))
    dist.destroy_process_group()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("kubeflow")]


@pytest.fixture
def sdk(kubeconfig: Path, namespace: str, caplog: pytest.LogCaptureFixture) -> TrainerClient:
    with caplog.at_level(logging.WARNING, logger="kubeflow"):
        client = TrainerClient(KubernetesBackendConfig(config_file=str(kubeconfig), namespace=namespace))
    # It reads ConfigMap kubeflow-system/kubeflow-trainer-public when it connects, and warns without it.
    assert not warnings(caplog)
    return client


def test_the_shipped_runtimes_are_listed_with_their_framework(
    sdk: TrainerClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kubeflow"):
        runtimes = {runtime.name: runtime for runtime in sdk.list_runtimes()}
    # A runtime without the label trainer.kubeflow.org/framework is left out, with a warning.
    assert not warnings(caplog)
    assert {name: r.trainer.framework for name, r in runtimes.items()} == shipped_runtimes()
    torch = runtimes["torch-distributed"].trainer
    assert torch.trainer_type == TrainerType.CUSTOM_TRAINER and "torchrun" in torch.command[2]
    assert runtimes["deepspeed-distributed"].trainer.command[0] == "mpirun"
    assert runtimes["torchtune-llama3.2-1b"].trainer.trainer_type == TrainerType.BUILTIN_TRAINER


def test_a_custom_trainer_runs_on_the_process_node(sdk: TrainerClient, tmp_path: Path) -> None:
    go, out = tmp_path / "go", tmp_path / "out"
    out.mkdir()
    job = sdk.train(
        runtime=sdk.get_runtime("torch-distributed"),
        trainer=CustomTrainer(
            func=all_reduce_then_write,
            func_args={"go": str(go), "out": str(out)},
            num_nodes=2,
            resources_per_node={"cpu": "500m"},
        ),
    )
    running = sdk.wait_for_job_status(job, status={"Running"}, timeout=300, polling_interval=1)
    assert sorted((step.name, step.status) for step in running.steps) == [
        ("node-0", "Running"),
        ("node-1", "Running"),
    ]

    go.touch()  # the function waits for it: the job was running, not yet done
    done = sdk.wait_for_job_status(job, timeout=300, polling_interval=1)
    assert done.status == "Complete"
    assert sorted((step.name, step.status) for step in done.steps) == [
        ("node-0", "Succeeded"),
        ("node-1", "Succeeded"),
    ]
    assert {p.name: p.read_text() for p in out.iterdir()} == {"rank-0": "3", "rank-1": "3"}
    assert "rank 0 of 2 on node 0: sum 3" in list(sdk.get_job_logs(job))
    assert "rank 1 of 2 on node 1: sum 3" in list(sdk.get_job_logs(job, step="node-1"))
