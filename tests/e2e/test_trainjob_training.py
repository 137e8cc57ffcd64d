"""TrainJobs training for real on the process node, through torchrun, with checkpoint-aware resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.conftest import REPO, Kubectl, Walkthrough
from tests.e2e.test_process_node_training import claim_dir, logs, make_claim
from tests.support import Jobs, eventually

TJ = "TrainJob"
LOCAL_RUNTIME = REPO / "examples" / "trainjob-runtime-local.yaml"


def runtime_from_example(
    name: str, *, backoff_limit: int | None = None, restart_policy: str | None = None, **jobset_spec: Any
) -> dict[str, Any]:
    """examples/trainjob-runtime-local.yaml as a TrainingRuntime of the test's namespace."""
    runtime: dict[str, Any] = yaml.safe_load(Path(LOCAL_RUNTIME).read_text())
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"]["name"] = name
    runtime["spec"]["template"]["spec"].update(jobset_spec)
    job_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    if backoff_limit is not None:
        job_spec["backoffLimit"] = backoff_limit
    pod_spec = job_spec["template"]["spec"]
    pod_spec["terminationGracePeriodSeconds"] = 5
    pod_spec["containers"][0]["workingDir"] = str(REPO)
    if restart_policy:
        pod_spec["restartPolicy"] = restart_policy
    return runtime


@pytest.fixture
async def local_runtime(jobs: Jobs) -> str:
    runtime = runtime_from_example("torch-distributed-local")
    await jobs.create(runtime)
    return str(runtime["metadata"]["name"])


def digits(
    name: str,
    runtime: str,
    *args: str,
    nodes: int = 2,
    claim: str | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta = dict(annotations or {})
    if claim:
        meta |= {"kubetrain.dev/checkpoint-dir": "/checkpoints", "kubetrain.dev/checkpoint-volume": claim}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": meta},
        "spec": {
            "runtimeRef": {"name": runtime, "kind": "TrainingRuntime"},
            "trainer": {"numNodes": nodes, "args": list(args)},
            **spec,
        },
    }


async def _pod(jobs: Jobs, name: str, rank: int) -> str:
    pods = await jobs.trainjob_pods(name, live=False)
    ranked = [p for p in pods if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == str(rank)]
    return str(sorted(ranked, key=lambda p: p.metadata.creation_timestamp)[-1].metadata.name)


async def test_the_walkthrough_trains_two_nodes_through_torchrun_to_complete(
    walkthrough: Walkthrough, jobs: Jobs, core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    done = await walkthrough(
        "docs/trainjob.md",
        "kubectl apply -f examples/trainjob-runtime-local.yaml -f examples/trainjob-digits.yaml",
        "kubectl get clustertrainingruntimes",
        "kubectl wait --for=condition=Complete trainjob/digits",
        "kubectl logs -l jobset.sigs.k8s.io/jobset-name=digits",
    )
    assert "torch-distributed-local" in done.stdout
    assert "[rank 0] training step=200" in done.stdout, done.stdout[-800:]
    job = await jobs.get("digits", kind=TJ)
    assert job is not None
    report = json.loads(job["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["status"] == "completed" and report["step"] == 200
    assert report["metrics"]["accuracy"] > 0.5
    out = kubectl("logs", await _pod(jobs, "digits", 1), "-n", namespace).stdout
    assert "[rank 1] training step=200" in out, out[-800:]
    host_dir = await claim_dir(core, namespace, "digits-trainjob-checkpoints")
    assert (host_dir / "step-00000200" / "COMPLETE").exists()


async def test_a_failing_trainer_exhausts_max_restarts_and_says_why(
    controller: Any, jobs: Jobs, namespace: str
) -> None:
    fragile = runtime_from_example(
        "fragile", backoff_limit=0, restart_policy="Never", failurePolicy={"maxRestarts": 1}
    )
    await jobs.create(fragile)
    await jobs.create(digits("broken", "fragile", "--steps=40", "--fail-at-step=5", nodes=1))
    job = await jobs.wait_condition("broken", "Failed", kind=TJ, timeout=240)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert "exited with code 1" in failed["message"] and "maxRestarts 1" in failed["message"]
    assert job["status"]["restarts"] == 1


async def test_suspend_then_resume_finishes(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, local_runtime: str
) -> None:
    await make_claim(core, namespace, "ckpt")
    args = ("--steps=200", "--checkpoint-every=20", "--step-seconds=0.05")
    await jobs.create(digits("pausable", local_runtime, *args, claim="ckpt"))
    host_dir = await claim_dir(core, namespace, "ckpt")
    await eventually(lambda: _checkpointed(host_dir, 40), timeout=180, what="a checkpoint at step >= 40")
    await jobs.patch("pausable", {"spec": {"suspend": True}}, kind=TJ)
    await jobs.wait_condition("pausable", "Suspended", kind=TJ)
    await eventually(lambda: _no_pods(jobs, "pausable"), timeout=60, what="the suspended job's pods to go")
    await jobs.patch("pausable", {"spec": {"suspend": False}}, kind=TJ)
    job = await jobs.wait_condition("pausable", "Complete", kind=TJ, timeout=240)
    report = json.loads(job["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["step"] == 200 and report["resumed_from_step"] >= 40, report


async def test_a_resubmitted_trainjob_resumes_from_the_checkpoint_dir(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    # Restarts in place (the JobSet default, OnFailure) resume too; one is allowed before the job fails.
    await jobs.create(runtime_from_example("once", backoff_limit=1))
    await make_claim(core, namespace, "ckpt")
    args = ("--steps=100", "--checkpoint-every=20", "--fail-at-step=70")
    await jobs.create(digits("attempt-1", "once", *args, claim="ckpt", nodes=1))
    failed = await jobs.wait_condition("attempt-1", "Failed", kind=TJ, timeout=300)
    assert (
        "last exited with code 1"
        in next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["message"]
    )
    last = failed["metadata"]["annotations"]["kubetrain.dev/last-checkpoint"]
    assert last == "/checkpoints/step-00000060"

    resubmitted = digits(
        "attempt-2",
        "once",
        *args,
        claim="ckpt",
        nodes=1,
        annotations={"kubetrain.dev/attempt": "2", "kubetrain.dev/last-checkpoint": last},
    )
    await jobs.create(resubmitted)
    done = await jobs.wait_condition("attempt-2", "Complete", kind=TJ, timeout=240)
    report = json.loads(done["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["resumed_from_step"] == 60 and report["step"] == 100 and report["attempt"] == "2"
    assert "resumed from checkpoint step=60" in await logs(core, namespace, await _pod(jobs, "attempt-2", 0))


async def _checkpointed(directory: Path, step: int) -> bool:
    steps = [int(p.name.split("-")[1]) for p in directory.glob("step-*") if (p / "COMPLETE").exists()]
    return max(steps, default=0) >= step


async def _no_pods(jobs: Jobs, name: str) -> bool:
    return not await jobs.trainjob_pods(name)
