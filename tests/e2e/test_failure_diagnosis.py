"""A job whose ranks fail one after another is failed for the rank that failed first, with its last lines.

Real processes on the process node fail the way training processes do: one rank runs out of GPU
memory, the others then die in their next collective. No GPU is needed to print what a GPU failure
prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubetrain.devcluster.cluster import PROCESS_NODE
from tests.support import Jobs

ON_PROCESS_NODE = {
    "nodeSelector": {"kubetrain.dev/process-node": "true"},
    "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}],
}
# Rank 2 (Worker 1) runs out of GPU memory at once; the other ranks lose it at their next all-reduce.
RANK = """
import os, sys, time
rank = os.environ["RANK"]
print(f"[rank {rank}] step 3 loss 0.91", flush=True)
if rank == "2":
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)")
time.sleep(4)
print(f"[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout", file=sys.stderr)
sys.exit(1)
"""


def replica(count: int) -> dict[str, Any]:
    container = {"name": "pytorch", "image": "python", "command": [sys.executable, "-u", "-c", RANK]}
    return {
        "replicas": count,
        "restartPolicy": "Never",
        "template": {"spec": {**ON_PROCESS_NODE, "containers": [container]}},
    }


async def test_the_failure_names_the_rank_that_ran_out_of_gpu_memory_with_its_last_lines(
    controller: Any, jobs: Jobs, kubetrain: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    await jobs.create(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "oom"},
            "spec": {
                "runPolicy": {"backoffLimit": 2, "cleanPodPolicy": "None"},
                "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)},
            },
        }
    )
    job = await jobs.wait_condition("oom", "Failed", timeout=180)
    first = job["status"]["firstFailure"]
    assert (first["replicaType"], first["index"], first["pod"]) == ("Worker", 1, "oom-worker-1")
    assert (first["node"], first["exitCode"], first["category"]) == (PROCESS_NODE, 1, "GPUOutOfMemory")
    assert first["summary"].startswith("RuntimeError: CUDA out of memory")
    assert first["logTail"].startswith("[rank 2] step 3 loss 0.91\nTraceback (most recent call last):")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert "; first failure: Worker 1 (pod oom-worker-1 on node " in failed["message"]
    assert "exit code 1, GPUOutOfMemory: RuntimeError: CUDA out of memory" in failed["message"]
    # What a user runs: describe shows it, and waiting fails with that replica's lines, not rank 0's.
    described = kubetrain("describe", "pytorchjob/oom")
    assert "First failure: Worker 1 (pod oom-worker-1 on node" in described.stdout, described.stdout
    assert "RuntimeError: CUDA out of memory" in described.stdout
    waited = kubetrain("wait", "pytorchjob/oom")
    assert waited.returncode == 1
    assert "last log lines of Worker 1 (oom-worker-1), which failed first:" in waited.stderr, waited.stderr
    assert "[rank 2] step 3 loss 0.91" in waited.stderr


@pytest.fixture
def kubetrain(kubeconfig: Path, namespace: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kubetrain", *args, "-n", namespace],
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run
