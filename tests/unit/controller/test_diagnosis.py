"""The replica that failed first, and what kind of failure it was, from pods as the kubelet leaves them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubetrain.controller import diagnosis

Obj = dict[str, Any]


def pod(
    name: str, *, node: str = "gpu-1", terminated: Obj | None = None, last: Obj | None = None, **status: Any
) -> Obj:
    container: Obj = {
        "name": "pytorch",
        "state": {"terminated": terminated} if terminated else {"running": {}},
    }
    if last:
        container["lastState"] = {"terminated": last}
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node},
        "status": {
            "phase": "Failed" if terminated else "Running",
            "containerStatuses": [container],
            **status,
        },
    }


def ended(code: int, at: str, message: str = "", reason: str = "Error") -> Obj:
    return {"exitCode": code, "reason": reason, "finishedAt": at, "message": message}


TRACEBACK = """step 10 loss 0.31
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    main()
  File "train.py", line 33, in main
    batch = reshape(x)
ValueError: cannot reshape array of size 10 into shape (3,3)
"""
NCCL = """[rank 1] step 12
[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.
"""
GPU_OOM = """Traceback (most recent call last):
  File "train.py", line 20, in <module>
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)
"""


@pytest.mark.parametrize(
    ("code", "reason", "text", "category", "summary"),
    [
        (
            137,
            "OOMKilled",
            "",
            "OOMKilled",
            "the container exceeded its memory limit and the kernel killed it",
        ),
        (
            1,
            "Error",
            GPU_OOM,
            "GPUOutOfMemory",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
        ),
        (1, "Error", NCCL, "CommunicationFailure", NCCL.splitlines()[1]),
        (
            1,
            "Error",
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.3]:1234",
            "CommunicationFailure",
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.3]:1234",
        ),
        (
            1,
            "Error",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "CUDAError",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
        (
            1,
            "Error",
            TRACEBACK,
            "PythonException",
            "ValueError: cannot reshape array of size 10 into shape (3,3)",
        ),
        (137, "Error", "", "Signalled", "killed by SIGKILL"),
        (3, "Error", "bye", "ExitCode", "exited with code 3"),
    ],
)
def test_each_kind_of_failure_is_named(
    code: int, reason: str, text: str, category: str, summary: str
) -> None:
    assert diagnosis.classify(code, reason, text) == (category, summary)


def test_rank_0s_report_names_the_exception_the_script_died_of() -> None:
    report = {
        "status": "failed",
        "step": 40,
        "error": "KeyError: 'labels'",
        "traceback": "Traceback ...\nKeyError: 'labels'",
    }
    first = diagnosis.first_failure(
        [("Master", 0, pod("m", terminated=ended(1, "2026-01-01T00:00:09Z", json.dumps(report))))]
    )
    assert first is not None and (first.category, first.summary) == ("PythonException", "KeyError: 'labels'")
    assert first.log_tail == "Traceback ...\nKeyError: 'labels'"


def test_the_first_replica_to_end_is_named_not_rank_0_nor_the_last() -> None:
    pods = [
        ("Master", 0, pod("job-master-0", terminated=ended(1, "2026-01-01T00:01:40Z", NCCL))),
        ("Worker", 0, pod("job-worker-0", terminated=ended(1, "2026-01-01T00:01:41Z", NCCL))),
        # worker 1 ran out of GPU memory first, was restarted in place, and is running again
        ("Worker", 1, pod("job-worker-1", node="gpu-7", last=ended(1, "2026-01-01T00:00:10Z", GPU_OOM))),
    ]
    first = diagnosis.first_failure(pods)
    assert first is not None
    assert (first.replica_type, first.index, first.pod, first.node) == ("Worker", 1, "job-worker-1", "gpu-7")
    assert first.category == "GPUOutOfMemory" and first.exit_code == 1
    assert first.log_tail == GPU_OOM.strip()
    assert first.describe().startswith(
        "first failure: Worker 1 (pod job-worker-1 on node gpu-7 at 2026-01-01T00:00:10Z): exit code 1, GPUOutOfMemory: "
    )
    assert first.as_status()["category"] == "GPUOutOfMemory" and first.as_status()["logTail"]


def test_a_long_log_keeps_its_last_lines() -> None:
    text = "\n".join(f"line {i}" for i in range(200))
    first = diagnosis.first_failure([("Worker", 0, pod("w", terminated=ended(2, "t", text)))])
    assert first is not None and first.log_tail.splitlines() == [f"line {i}" for i in range(180, 200)]


def test_pods_that_never_ran_say_why() -> None:
    pulling = pod("a", node="")
    pulling["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}
    }
    pending = pod(
        "b",
        node="",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            }
        ],
    )
    preempted = pod(
        "c",
        conditions=[
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "urgent preempts it",
            }
        ],
    )
    evicted = pod("d", reason="Evicted", message="The node was low on resource: memory.")
    for item, category, summary in [
        (pulling, "ImagePull", 'Back-off pulling image "nope:1"'),
        (pending, "Unschedulable", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
        (preempted, "Disrupted", "urgent preempts it"),
        (evicted, "Evicted", "The node was low on resource: memory."),
    ]:
        first = diagnosis.first_failure([("Worker", 0, item)], containers=False)
        assert first is not None and (first.category, first.summary) == (category, summary)
    assert diagnosis.first_failure([("Worker", 0, pod("fine"))]) is None
    restarted = pod("r", last=ended(1, "t", TRACEBACK))
    assert diagnosis.first_failure([("Worker", 0, restarted)], containers=False) is None
