"""Real distributed training on the process node, and checkpoint-aware resume under faults."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes_asyncio import client

from kubetrain import checkpoint, naming
from kubetrain.client.aio import pod_log
from kubetrain.devcluster.cluster import DevCluster
from tests.conftest import REPO, Kubectl, Walkthrough
from tests.support import Jobs, eventually

STEPS_LINE = re.compile(r"\[rank (\d+)\] training step=(\d+)")
RESUMED_LINE = re.compile(r"\[rank (\d+)\] resumed from checkpoint step=(\d+)")
PROCESS_NODE = {
    "nodeSelector": {"kubetrain.dev/process-node": "true"},
    "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}],
}


def digits_job(
    name: str,
    *,
    steps: int = 120,
    every: int = 20,
    step_seconds: float = 0.0,
    workers: int = 2,
    restart_policy: str = "OnFailure",
    run_policy: dict[str, Any] | None = None,
    claim: str | None = None,
    extra_args: tuple[str, ...] = (),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob that trains examples/train_ddp.py on the process node."""
    command = [
        "python",
        "examples/train_ddp.py",
        f"--steps={steps}",
        f"--checkpoint-every={every}",
        f"--step-seconds={step_seconds}",
        *extra_args,
    ]

    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "kubetrain/kubetrain:0.1.0",
            "command": command,
            "workingDir": str(REPO),
        }
        return {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {
                "spec": {**PROCESS_NODE, "containers": [container], "terminationGracePeriodSeconds": 5}
            },
        }

    meta_annotations = dict(annotations or {})
    if claim:
        meta_annotations.update(
            {"kubetrain.dev/checkpoint-dir": "/checkpoints", "kubetrain.dev/checkpoint-volume": claim}
        )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": meta_annotations},
        "spec": {
            "runPolicy": run_policy or {},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)},
        },
    }


async def make_claim(core: client.CoreV1Api, namespace: str, name: str) -> None:
    await core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )


async def claim_dir(core: client.CoreV1Api, namespace: str, name: str) -> Path:
    """Where the claim lives on this host (the hostPath of its PersistentVolume)."""

    async def bound() -> str | None:
        claim = await core.read_namespaced_persistent_volume_claim(name, namespace)
        return claim.spec.volume_name if claim.status.phase == "Bound" else None

    volume = await eventually(bound, what=f"claim {name} to be bound")
    pv = await core.read_persistent_volume(volume)
    return Path(pv.spec.host_path.path)


async def logs(core: client.CoreV1Api, namespace: str, pod: str, *, previous: bool = False) -> str:
    return await pod_log(core, pod, namespace, previous=previous)


async def test_the_walkthrough_trains_a_master_and_two_workers_to_success(
    walkthrough: Walkthrough, jobs: Jobs, core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    done = await walkthrough(
        "docs/process-node.md",
        "kubectl apply -f examples/pytorchjob-digits.yaml",
        "kubectl wait --for=condition=Succeeded pytorchjob/digits",
        "kubectl logs -f digits-worker-1",
    )
    assert "[rank 2] training step=200" in done.stdout, done.stdout[-500:]
    job = await jobs.get("digits")
    assert job is not None
    report = json.loads(job["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["status"] == "completed" and report["step"] == 200
    assert report["metrics"]["accuracy"] > 0.8
    assert job["metadata"]["annotations"]["kubetrain.dev/last-checkpoint"] == "/checkpoints/step-00000200"
    for rank, pod in enumerate(["digits-master-0", "digits-worker-0"]):
        out = kubectl("logs", pod, "-n", namespace).stdout
        assert f"[rank {rank}] training step=200" in out, out[-500:]
    tail = kubectl("logs", "digits-master-0", "-n", namespace, "--tail=1").stdout.strip().splitlines()
    assert len(tail) == 1 and "done" in tail[0]
    event = await jobs.wait_event("digits", "TrainingReport")
    assert "accuracy=" in event[2]
    host_dir = await claim_dir(core, namespace, "digits-checkpoints")
    assert (host_dir / "step-00000200" / "COMPLETE").exists()


async def test_a_killed_worker_restarts_and_every_rank_resumes(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    every = 20
    await make_claim(core, namespace, "ckpt")
    await jobs.create(
        digits_job(
            "resilient",
            steps=200,
            every=every,
            step_seconds=0.05,
            claim="ckpt",
            run_policy={"backoffLimit": 10},
        )
    )
    host_dir = await claim_dir(core, namespace, "ckpt")
    await eventually(lambda: _has_checkpoint(host_dir, 60), timeout=120, what="a checkpoint at step >= 60")
    worker = await eventually(lambda: _process_of(namespace, "resilient-worker-0"), what="worker-0's process")
    reached = _latest_step(host_dir)
    uids = {pod.metadata.name: pod.metadata.uid for pod in (await core.list_namespaced_pod(namespace)).items}
    worker.send_signal(signal.SIGKILL)

    job = await jobs.wait_condition("resilient", "Succeeded", timeout=240)
    assert job["status"]["restartCount"] >= 1
    # OnFailure restarts containers in place, as upstream: the same pods, no Restarting state.
    after = {pod.metadata.name: pod.metadata.uid for pod in (await core.list_namespaced_pod(namespace)).items}
    assert after == uids
    assert not any(reason == "PyTorchJobRestarting" for _, reason, _ in await jobs.events("resilient"))
    for pod in ["resilient-master-0", "resilient-worker-0", "resilient-worker-1"]:
        resumed = [int(m[2]) for m in RESUMED_LINE.finditer(await logs(core, namespace, pod))]
        assert resumed, f"{pod} did not resume from a checkpoint"
        assert resumed[0] >= reached - every, f"{pod} repeated more than one checkpoint interval"
        assert resumed[0] > 0


async def _has_checkpoint(directory: Path, step: int) -> bool:
    return _latest_step(directory) >= step


def _latest_step(directory: Path) -> int:
    steps = [int(p.name.split("-")[1]) for p in directory.glob("step-*") if (p / "COMPLETE").exists()]
    return max(steps, default=0)


def _training_processes(namespace: str) -> Iterator[tuple[psutil.Process, dict[str, str]]]:
    """The processes of examples/train_ddp.py that run pods of ``namespace``, with their env."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "examples/train_ddp.py" not in " ".join(proc.info["cmdline"] or []):
                continue
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("KUBETRAIN_POD_NAMESPACE") == namespace:
            yield proc, env


async def _process_of(namespace: str, pod: str) -> psutil.Process | None:
    return next(
        (p for p, env in _training_processes(namespace) if env.get("KUBETRAIN_POD_NAME") == pod), None
    )


async def test_deleting_a_job_mid_run_leaves_nothing_running(
    controller: Any, jobs: Jobs, namespace: str
) -> None:
    await jobs.create(digits_job("doomed", steps=100_000, step_seconds=0.05))
    await jobs.wait_condition("doomed", "Running", timeout=120)
    await eventually(lambda: _count(namespace, 3), timeout=60, what="three training processes")
    await jobs.delete("doomed")
    # terminationGracePeriodSeconds is 5: everything must be gone well within that plus garbage collection.
    await eventually(lambda: _count(namespace, 0), timeout=30, what="every training process to be gone")
    await eventually(lambda: _nothing_left(jobs), timeout=30, what="pods and services to be gone")


async def _count(namespace: str, wanted: int) -> bool:
    return sum(1 for _ in _training_processes(namespace)) == wanted


async def _nothing_left(jobs: Jobs) -> bool:
    return not await jobs.pods() and not await jobs.services()


async def test_a_deadline_ends_a_long_job_and_keeps_its_checkpoints(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await make_claim(core, namespace, "ckpt")
    await jobs.create(
        digits_job(
            "endless", steps=100_000, every=10, step_seconds=0.05, claim="ckpt",
            run_policy={"cleanPodPolicy": "Running"},
        )
    )  # fmt: skip
    await deadline_after_a_checkpoint(jobs, core, namespace, "endless")
    job = await jobs.wait_condition("endless", "Failed", timeout=120)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    await eventually(lambda: _count(namespace, 0), timeout=30, what="the training processes to be stopped")
    host_dir = await claim_dir(core, namespace, "ckpt")
    assert _latest_step(host_dir) >= 10, "the checkpoints survive the job"


async def test_a_resubmitted_job_resumes_from_the_same_checkpoint_dir(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await make_claim(core, namespace, "ckpt")
    first = digits_job(
        "attempt-1",
        steps=100,
        every=20,
        claim="ckpt",
        restart_policy="Never",
        extra_args=("--fail-at-step=70",),
    )
    await jobs.create(first)
    failed = await jobs.wait_condition("attempt-1", "Failed", timeout=180)
    assert (
        "exited with code 1"
        in next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["message"]
    )
    reported = await eventually(
        lambda: _annotation(jobs, "attempt-1", "kubetrain.dev/last-checkpoint"),
        what="rank 0's report of its last checkpoint",
    )
    assert reported == "/checkpoints/step-00000060"
    last = reported

    second = digits_job(
        "attempt-2",
        steps=100,
        every=20,
        claim="ckpt",
        extra_args=("--fail-at-step=70",),
        annotations={"kubetrain.dev/attempt": "2", "kubetrain.dev/last-checkpoint": last},
    )
    await jobs.create(second)
    done = await jobs.wait_condition("attempt-2", "Succeeded", timeout=180)
    report = json.loads(done["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["resumed_from_step"] == 60 and report["step"] == 100 and report["attempt"] == "2"
    master_log = await logs(core, namespace, "attempt-2-master-0")
    assert "resumed from checkpoint step=60" in master_log


async def test_a_resubmitted_job_resumes_from_its_checkpoints_in_object_storage(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, dev_cluster: DevCluster
) -> None:
    """The same with checkpoints in the dev cluster's S3 server: nothing mounted, the credentials from a
    Secret the job names, the commit protocol between the upload and the report."""
    store = dev_cluster.object_store()
    assert store is not None, "the test cluster runs its S3 server (`kubetrain dev up --object-store`)"
    await core.create_namespaced_secret(namespace, store.secret("s3", namespace))
    location = f"s3://{store.bucket}/{namespace}/digits"
    opted_in = {"kubetrain.dev/checkpoint-dir": location, "kubetrain.dev/checkpoint-secret": "s3"}
    first = digits_job(
        "s3-attempt-1",
        steps=100,
        restart_policy="Never",
        extra_args=("--fail-at-step=70",),
        annotations=opted_in,
    )
    await jobs.create(first)
    await jobs.wait_condition("s3-attempt-1", "Failed", timeout=180)
    reported = await eventually(
        lambda: _annotation(jobs, "s3-attempt-1", "kubetrain.dev/last-checkpoint"),
        what="rank 0's report of its last checkpoint",
    )
    assert reported == f"{location}/step-00000060"
    second = digits_job(
        "s3-attempt-2",
        steps=100,
        annotations={**opted_in, "kubetrain.dev/attempt": "2", "kubetrain.dev/last-checkpoint": reported},
    )
    await jobs.create(second)
    done = await jobs.wait_condition("s3-attempt-2", "Succeeded", timeout=180)
    report = json.loads(done["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert report["resumed_from_step"] == 60 and report["step"] == 100, report
    assert report["last_checkpoint"] == f"{location}/step-00000100"
    pod = await core.read_namespaced_pod("s3-attempt-2-master-0", namespace)
    assert not pod.spec.volumes or all(v.name != "kubetrain-checkpoints" for v in pod.spec.volumes)
    data = dev_cluster.state_dir / "object-store" / "data" / location.removeprefix("s3://")
    committed = sorted(f"{p.parent.name}/{p.name}" for p in data.glob("step-*/COMPLETE-*"))
    assert committed == [
        "step-00000060/COMPLETE-a1",
        "step-00000080/COMPLETE-a2",
        "step-00000100/COMPLETE-a2",
    ], "retention keeps the newest three, in the order attempts and steps rank them"


@pytest.mark.parametrize("failure", ["DeadlineExceeded", "BackoffLimitExceeded"])
async def test_the_retry_of_a_failed_on_failure_job_trains_alone_on_one_history(
    failure: str,
    controller: Any,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    shell: dict[str, str],
    tmp_path: Path,
) -> None:
    """An OnFailure job on an RWX checkpoint volume fails (its deadline, or its backoff limit while its
    containers restart in place); the retry a user runs (``kubetrain resume``) trains with no process of
    the failed attempt beside it, and the directory holds one history: attempt 1, then attempt 2 from
    where attempt 1 got to."""
    await make_claim(core, namespace, "ckpt")
    if failure == "DeadlineExceeded":
        first = digits_job("run", steps=100_000, every=10, step_seconds=0.05, workers=1, claim="ckpt")
    else:  # fails at step 35 on attempt 1 only: each restart resumes from step 30 and fails again
        first = digits_job(
            "run", steps=60, every=10, workers=1, claim="ckpt", extra_args=("--fail-at-step=35",),
            run_policy={"backoffLimit": 1},
        )  # fmt: skip
    await jobs.create(first)
    if failure == "DeadlineExceeded":
        await deadline_after_a_checkpoint(jobs, core, namespace, "run")
    failed = await jobs.wait_condition("run", "Failed", timeout=300)
    assert next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["reason"] == failure

    resume = await asyncio.to_thread(
        subprocess.run,
        ["kubetrain", "resume", "pytorchjob/run", "--pod-wait=60"],
        env=shell,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resume.returncode == 0, resume.stdout + resume.stderr
    retry = naming.attempt_name("run", 2)
    assert f"submitted PyTorchJob {namespace}/{retry} (attempt 2)" in resume.stdout

    async def attempt_2_alone() -> bool:
        attempts = await _attempts_training(namespace)
        assert attempts <= {"2"}, f"processes of attempts {sorted(attempts)} train on one directory"
        return attempts == {"2"}

    await eventually(attempt_2_alone, timeout=120, what="attempt 2 to train")
    while not await _finished(jobs, retry):
        await attempt_2_alone()  # and nothing of attempt 1 comes back while it runs
        await asyncio.sleep(0.5)

    host_dir = await claim_dir(core, namespace, "ckpt")
    records = [json.loads(line) for line in (host_dir / "metrics.jsonl").read_text().splitlines()]
    order = [r["attempt"] for r in records]
    assert order == sorted(order) and set(order) == {1, 2}, f"attempts interleave in the history: {order}"
    reported = (await jobs.get("run") or {})["metadata"]["annotations"]["kubetrain.dev/last-checkpoint"]
    resumed_from = int(reported.rsplit("-", 1)[1])  # attempt 1's last checkpoint, where attempt 2 began
    second = [r["step"] for r in records if r["attempt"] == 2]
    # attempt 1 saved where its deadline stopped it; attempt 2 records every 10 steps from there
    assert second == sorted(set(second)) and second[0] == (resumed_from // 10 + 1) * 10, (
        resumed_from,
        second,
    )
    published = [e for e in checkpoint.scan(host_dir) if e.kind == "step" and e.complete]
    assert max(published, key=lambda e: e.step).attempt == 2
    assert all(e.step <= resumed_from for e in published if e.attempt == 1)
    assert checkpoint.read_fence(host_dir, "run") == 2

    if failure == "DeadlineExceeded":
        return  # attempt 2 failed by its deadline too: its running pods, and their logs, are gone
    # The lineage's curves, from rank 0's logs of each attempt still there (attempt 2 succeeded and
    # keeps its pods).
    png = tmp_path / "run.png"
    plotted = await asyncio.to_thread(
        subprocess.run,
        ["kubetrain", "plot", f"pytorchjob/{retry}", "--output", str(png)],
        env=shell, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert plotted.returncode == 0, plotted.stdout + plotted.stderr
    assert f"wrote {png}: run, {retry}" in " ".join(plotted.stdout.split()), plotted.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


async def deadline_after_a_checkpoint(jobs: Jobs, core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Once the job has a checkpoint, give it a deadline 15 s away: it fails by its deadline after
    it trained, however long its processes took to start (a resumed attempt gets as long)."""
    host_dir = await claim_dir(core, namespace, "ckpt")
    await eventually(lambda: _has_checkpoint(host_dir, 10), timeout=180, what="a checkpoint at step >= 10")
    job = await jobs.get(name)
    assert job is not None
    started = dt.datetime.fromisoformat(job["status"]["startTime"].replace("Z", "+00:00"))
    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
    await jobs.patch(name, {"spec": {"runPolicy": {"activeDeadlineSeconds": int(elapsed) + 15}}})


async def _attempts_training(namespace: str) -> set[str]:
    """The ``KUBETRAIN_ATTEMPT`` of every training process of the namespace."""
    return {env.get("KUBETRAIN_ATTEMPT", "1") for _, env in _training_processes(namespace)}


async def _finished(jobs: Jobs, name: str) -> bool:
    job = await jobs.get(name)
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions)


@pytest.fixture(autouse=True)
def _processes_are_cleaned_up(namespace: str) -> Any:
    yield
    # A failed test must not leave training processes behind for the next one.
    for proc, _ in _training_processes(namespace):
        with contextlib.suppress(psutil.Error):
            proc.kill()


async def _annotation(jobs: Jobs, name: str, key: str) -> str | None:
    job = await jobs.get(name)
    value = ((job or {}).get("metadata", {}).get("annotations") or {}).get(key)
    return str(value) if value else None


async def _trained_to(core: client.CoreV1Api, namespace: str, pod: str, step: int) -> int:
    """The last step ``pod`` logged, once it is at least ``step`` (else 0)."""
    try:
        text = await logs(core, namespace, pod)
    except client.ApiException:
        return 0  # not started yet
    steps = [int(m[2]) for m in STEPS_LINE.finditer(text)]
    return max(steps, default=0) if max(steps, default=0) >= step else 0


@pytest.mark.parametrize("how", ["evicted", "drained"])
async def test_a_disrupted_job_saves_where_it_stopped_and_resumes_there_uncounted(
    how: str, controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    """The master evicted through the Eviction API, or the whole node drained (then uncordoned): the job
    succeeds with the disruption counted and no restart, and every rank resumed from the step the
    disrupted attempt stopped at (saved then: no periodic checkpoint is that early)."""
    await make_claim(core, namespace, "ckpt")
    job = digits_job(how, steps=400, every=1000, step_seconds=0.05, workers=1, claim="ckpt",
                     run_policy={"backoffLimit": 0})  # fmt: skip
    await jobs.create(job)
    host_dir = await claim_dir(core, namespace, "ckpt")
    master = f"{how}-master-0"
    reached = await eventually(
        lambda: _trained_to(core, namespace, master, 60), timeout=180, what="step 60 on the master"
    )
    if how == "evicted":
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=master, namespace=namespace))
        await core.create_namespaced_pod_eviction(master, namespace, eviction)
    else:
        node = (await core.read_namespaced_pod(master, namespace)).spec.node_name
        try:
            selector = f"--pod-selector=training.kubeflow.org/job-name={how}"
            drained = await asyncio.to_thread(kubectl, "drain", node, selector, "--timeout=90s")
            assert drained.returncode == 0, drained.stderr
        finally:
            await asyncio.to_thread(kubectl, "uncordon", node)

    done = await jobs.wait_condition(how, "Succeeded", timeout=300)
    assert done["status"].get("disruptions", 0) >= 1, done["status"]
    assert done["status"].get("restartCount", 0) == 0, done["status"]
    assert any(reason == "PyTorchJobDisrupted" for _, reason, _ in await jobs.events(how))
    for pod in [master, f"{how}-worker-0"]:
        resumed = [int(m[2]) for m in RESUMED_LINE.finditer(await logs(core, namespace, pod))]
        assert resumed, f"{pod} did not resume from a checkpoint"
        assert reached <= resumed[0] < 1000, (pod, resumed, reached)
    saved = sorted(int(p.name.split("-")[1]) for p in host_dir.glob("step-*"))
    assert resumed[0] in saved, saved
