"""Preemption of real training on the process node: Kueue suspends a checkpointing job for a
higher-priority one, and when it re-admits it, the job continues from its last checkpoint. The pods
reach the process node only through the flavor Kueue injects (their templates name no node)."""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes_asyncio import client

from tests.conftest import REPO
from tests.e2e.test_process_node_training import STEPS_LINE, claim_dir, logs, make_claim
from tests.kueue.test_admission import queued
from tests.support import Jobs, eventually

ONE_CPU = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def single_rank(name: str, command: list[str], *, claim: str | None = None) -> dict[str, Any]:
    """A PyTorchJob of one Master asking for the process-node queue's whole quota (one CPU)."""
    container = {
        "name": "pytorch",
        "image": "kubetrain/kubetrain:0.1.0",
        "command": command,
        "workingDir": str(REPO),
        "resources": ONE_CPU,
    }
    annotations = (
        {"kubetrain.dev/checkpoint-dir": "/checkpoints", "kubetrain.dev/checkpoint-volume": claim}
        if claim
        else {}
    )
    template = {"spec": {"containers": [container], "terminationGracePeriodSeconds": 10}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "runPolicy": {"backoffLimit": 0},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
            },
        },
    }


async def _trained_step(core: client.CoreV1Api, namespace: str, pod: str) -> int:
    try:
        text = await logs(core, namespace, pod)
    except client.ApiException:
        return 0
    steps = [int(m[2]) for m in STEPS_LINE.finditer(text)]
    return max(steps, default=0)


async def test_a_preempted_training_job_resumes_from_its_last_checkpoint(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, queues: str
) -> None:
    namespace = queues
    await make_claim(core, namespace, "ckpt")
    train = ["python", "examples/train_ddp.py", "--steps=160", "--checkpoint-every=10", "--step-seconds=0.1"]
    await jobs.create(queued(single_rank("low", train, claim="ckpt"), queue="process-node", priority="low"))
    await eventually(
        lambda: _at_least(core, namespace, "low-master-0", 40), timeout=180, what="low to train past step 40"
    )

    [preempted] = await jobs.pods("low")
    preempting = time.monotonic()
    quick = ["python", "-c", "print('high priority work done')"]
    await jobs.create(queued(single_rank("high", quick), queue="process-node", priority="high"))
    await jobs.wait_condition("low", "Suspended", timeout=60)
    # The high job is quick: Kueue may re-admit low, and give it a new pod, before a poll sees none.
    await eventually(lambda: _gone(jobs, preempted.metadata.uid), timeout=60, what="low's pod to go")
    suspended_after = time.monotonic() - preempting
    saved = sorted(
        p.name for p in (await claim_dir(core, namespace, "ckpt")).iterdir() if p.name.startswith("step-")
    )
    assert saved, "the preempted job's checkpoints are kept"

    await jobs.wait_condition("high", "Succeeded", timeout=120)
    finished = time.monotonic()
    await jobs.wait_pods("low", 1, phase="Running", timeout=120)
    readmitted_after = time.monotonic() - finished
    done = await jobs.wait_condition("low", "Succeeded", timeout=300)
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in done["status"]["conditions"])
    report = json.loads(done["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["step"] == 160 and report["resumed_from_step"] >= 40, report
    assert f"resumed from checkpoint step={report['resumed_from_step']}" in await logs(
        core, namespace, "low-master-0"
    )
    print(
        f"preemption to pod gone: {suspended_after:.1f}s; quota free to pod Running: {readmitted_after:.1f}s; "
        f"resumed from step {report['resumed_from_step']} (checkpoints kept: {saved})"
    )


async def _at_least(core: client.CoreV1Api, namespace: str, pod: str, step: int) -> bool:
    return await _trained_step(core, namespace, pod) >= step


async def _gone(jobs: Jobs, uid: str) -> bool:
    return all(pod.metadata.uid != uid for pod in await jobs.pods("low"))
