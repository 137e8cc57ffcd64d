"""kubeflow-training's ``TrainingClient`` (the Training Operator v1 SDK), unchanged, against kubetrain's
controller: a PyTorchJob made from a function trains for real on the process node."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubeflow.training import TrainingClient

from kubetrain.devcluster.cluster import PROCESS_NODE

pytestmark = pytest.mark.usefixtures("sdk_cluster", "controller_process")


def all_reduce_then_write(parameters):  # type: ignore[no-untyped-def]
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
    print(f"rank {rank} of {dist.get_world_size()} in {os.environ['HOSTNAME']}: sum {int(total)}", flush=True)
    go = pathlib.Path(parameters["go"])
    deadline = time.monotonic() + 300
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    pathlib.Path(parameters["out"], f"rank-{rank}").write_text(str(int(total)))
    dist.destroy_process_group()


def test_a_job_from_a_train_func_runs_on_the_process_node(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    go, out = tmp_path / "go", tmp_path / "out"
    out.mkdir()
    sdk = TrainingClient(config_file=str(kubeconfig), namespace=namespace)
    sdk.create_job(
        name="hello",
        train_func=all_reduce_then_write,
        parameters={"go": str(go), "out": str(out)},
        num_workers=2,
        num_procs_per_worker=1,  # torchrun, one process in each pod
    )
    sdk.wait_for_job_conditions(
        "hello", expected_conditions={"Running"}, wait_timeout=300, polling_interval=1
    )
    assert sdk.is_job_running("hello") and not sdk.is_job_succeeded("hello")
    assert {pod.spec.node_name for pod in sdk.get_job_pods("hello")} == {PROCESS_NODE}

    go.touch()  # the function waits for it: the job was running, not yet done
    sdk.wait_for_job_conditions("hello", wait_timeout=300, polling_interval=1)
    assert sdk.is_job_succeeded("hello") and not sdk.is_job_running("hello")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"rank-0": "3", "rank-1": "3"}

    master, _ = sdk.get_job_logs("hello")
    assert list(master) == ["hello-master-0"]
    assert "rank 0 of 2 in hello-master-0: sum 3" in master["hello-master-0"]
    every, _ = sdk.get_job_logs("hello", is_master=False)
    assert "rank 1 of 2 in hello-worker-0: sum 3" in every["hello-worker-0"]
