"""Sharded, asynchronous checkpoints end to end: FSDP2 jobs on the process node (CPU, gloo) save with
``save(state, step, sharded=True, blocking=False)`` into the dev cluster's S3 server, and their retries
resume from the last committed step.

The jobs train ``examples/train_fsdp.py``. Each rank logs a SHA-256 of the whole model and optimizer
state when it stages a step and when it resumes from one: equal digests show that a resume (in any
world size) continued from exactly the state that was saved.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from kubetrain import naming
from kubetrain.checkpoint import CheckpointManager
from kubetrain.devcluster.cluster import DevCluster
from tests.conftest import REPO
from tests.docs_commands import documented
from tests.e2e.test_process_node_training import PROCESS_NODE, logs
from tests.e2e.test_trainjob_training import TJ, _pod, runtime_from_example
from tests.support import Jobs, eventually

SCRIPT = "examples/train_fsdp.py"
# The pods import the kubetrain of this checkout, whichever interpreter the process node runs them with.
POD_ENV = [{"name": "PYTHONPATH", "value": str(REPO)}, {"name": "OMP_NUM_THREADS", "value": "1"}]
STAGED = re.compile(r"\[rank \d+\] checkpoint staged step=(\d+) state=(\w+)")
RESUMED = re.compile(r"\[rank \d+\] resumed from checkpoint step=(\d+) world_size=(\d+) state=(\w+)")


def fsdp_job(
    name: str,
    *args: str,
    workers: int,
    annotations: dict[str, str],
    restart_policy: str = "Never",
    run_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob of a Master and ``workers`` Workers training examples/train_fsdp.py."""

    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "kubetrain/kubetrain:0.1.0",
            "command": ["python", SCRIPT, *args],
            "workingDir": str(REPO),
            "env": POD_ENV,
        }
        return {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {
                "spec": {**PROCESS_NODE, "containers": [container], "terminationGracePeriodSeconds": 5}
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "runPolicy": run_policy or {},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)},
        },
    }


@pytest.fixture
async def s3(dev_cluster: DevCluster, core: client.CoreV1Api, namespace: str) -> tuple[str, Path]:
    """A fresh checkpoint location in the dev cluster's bucket, the Secret ``s3`` with its credentials in
    the test's namespace, and where the server keeps that location's objects on this host."""
    store = dev_cluster.object_store()
    assert store is not None, "the test cluster runs its S3 server (`kubetrain dev up --object-store`)"
    await core.create_namespaced_secret(namespace, store.secret("s3", namespace))
    location = f"s3://{store.bucket}/{namespace}/fsdp"
    return location, dev_cluster.state_dir / "object-store" / "data" / location.removeprefix("s3://")


def opted_in(location: str) -> dict[str, str]:
    return {"kubetrain.dev/checkpoint-dir": location, "kubetrain.dev/checkpoint-secret": "s3"}


def commits(data: Path) -> list[str]:
    """The commit objects under the location: ``step-<N>/COMPLETE-a<attempt>``."""
    return sorted(f"{p.parent.name}/{p.name}" for p in data.glob("step-*/COMPLETE-*"))


def manifest(data: Path, step: int) -> dict[str, Any]:
    [commit] = data.glob(f"step-{step:08d}/COMPLETE-*")
    found: dict[str, Any] = json.loads(commit.read_text())
    return found


def assert_every_rank_s_shard(data: Path, step: int, world_size: int) -> None:
    """The commit of ``step`` is a DCP manifest naming every rank's shard, each there with its size."""
    meta = manifest(data, step)
    assert meta["format"] == "dcp" and meta["world_size"] == world_size, meta
    names = {f["name"] for f in meta["files"]}
    assert names == {".metadata", *(f"__{rank}_0.distcp" for rank in range(world_size))}, names
    writer = data / f"step-{step:08d}" / meta["writer"]
    for entry in meta["files"]:
        assert (writer / entry["name"]).stat().st_size == entry["size"], entry


async def report_of(jobs: Jobs, name: str, *, kind: str = "PyTorchJob") -> dict[str, Any]:
    async def reported() -> dict[str, Any] | None:
        job = await jobs.get(name, kind=kind)
        text = ((job or {}).get("metadata", {}).get("annotations") or {}).get("kubetrain.dev/training-report")
        return json.loads(text) if text else None

    found: dict[str, Any] = await eventually(reported, what=f"{name}'s training report")
    return found


async def exit_codes(jobs: Jobs, job: str) -> dict[str, int] | None:
    """Each pod's exit code once none runs (the controller deletes a failed job's running pods)."""
    statuses = [(p.metadata.name, (p.status.container_statuses or [None])[0]) for p in await jobs.pods(job)]
    if any(status is None or status.state.terminated is None for _, status in statuses):
        return None
    return {name: status.state.terminated.exit_code for name, status in statuses} or {"": 86}


def staged(log: str) -> dict[int, str]:
    """The digest of the state of each step a rank staged, from its log."""
    return {int(m[1]): m[2] for m in STAGED.finditer(log)}


async def test_a_worker_killed_mid_upload_leaves_no_commit_and_kubetrain_resume_continues_from_the_last(
    controller: Any,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    s3: tuple[str, Path],
    shell: dict[str, str],
) -> None:
    """A Master and a Worker save FSDP2 state sharded and in the background every 10 steps; the Worker
    ends its process right after step 30 was staged, while its shards upload. No commit of step 30
    exists, the failed job reports step 20, and the retry ``kubetrain resume`` submits resumes from step
    20 with the very state saved there, and finishes with step 40 committed."""
    location, data = s3
    args = ("--steps=40", "--checkpoint-every=10", "--die-after-staging=30", "--die-rank=1")
    await jobs.create(fsdp_job("fsdp", *args, workers=1, annotations=opted_in(location)))
    failed = await jobs.wait_condition("fsdp", "Failed", timeout=240)
    message = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["message"]
    worker_log = await logs(core, namespace, "fsdp-worker-0")
    assert "injected failure" in worker_log and "code 17" in message, (message, worker_log[-800:])
    report = await report_of(jobs, "fsdp")
    assert report["last_checkpoint"] == f"{location}/step-00000020", report
    assert commits(data) == ["step-00000010/COMPLETE-a1", "step-00000020/COMPLETE-a1"], (
        "step 30 was committed"
    )
    assert_every_rank_s_shard(data, 20, world_size=2)
    # the master was stopped when the job failed (its pod is gone); the worker logs the same digests
    saved = staged(worker_log)
    assert set(saved) >= {10, 20, 30}, saved

    resume = await asyncio.to_thread(
        subprocess.run,
        ["kubetrain", "resume", "pytorchjob/fsdp", "--pod-wait=60"],
        env=shell, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resume.returncode == 0, resume.stdout + resume.stderr
    retry = naming.attempt_name("fsdp", 2)
    await jobs.wait_condition(retry, "Succeeded", timeout=240)
    report = await report_of(jobs, retry)
    assert report["status"] == "completed" and report["attempt"] == "2", report
    assert report["resumed_from_step"] == 20 and report["step"] == 40, report
    assert report["last_checkpoint"] == f"{location}/step-00000040", report
    [resumed] = RESUMED.findall(await logs(core, namespace, f"{retry}-master-0"))
    assert resumed == ("20", "2", saved[20]), "the retry did not resume from the state saved at step 20"
    # kubetrain resume labels its attempts with their lineage, the first job's name
    assert commits(data)[-2:] == ["step-00000030/COMPLETE-a2@fsdp", "step-00000040/COMPLETE-a2@fsdp"]
    assert_every_rank_s_shard(data, 40, world_size=2)


async def test_a_worker_killed_mid_upload_is_restarted_in_place_and_every_rank_resumes_from_the_last_commit(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, s3: tuple[str, Path]
) -> None:
    """The same fault under ``restartPolicy: OnFailure``: the controller restarts the containers in place
    (the Worker's, and the Master's, which failed when its peer went), and both ranks resume from step 20
    with the state saved there, within attempt 1."""
    location, data = s3
    args = ("--steps=40", "--checkpoint-every=10", "--die-after-staging=30")
    job = fsdp_job(
        "restarted",
        *args,
        workers=1,
        annotations=opted_in(location),
        restart_policy="OnFailure",
        run_policy={"backoffLimit": 4},
    )
    await jobs.create(job)
    done = await jobs.wait_condition("restarted", "Succeeded", timeout=300)
    assert done["status"]["restartCount"] >= 1, done["status"]
    report = await report_of(jobs, "restarted")
    assert report["resumed_from_step"] == 20 and report["step"] == 40, report
    assert report["last_checkpoint"] == f"{location}/step-00000040", report
    first_run = await logs(core, namespace, "restarted-worker-0", previous=True)
    assert "injected failure" in first_run, first_run[-800:]
    saved = staged(first_run)
    for pod in ("restarted-master-0", "restarted-worker-0"):
        resumed = RESUMED.findall(await logs(core, namespace, pod))
        assert resumed == [("20", "2", saved[20])], f"{pod} did not resume from the state saved at step 20"
    # retention keeps three; the first run's step-30 shards were never committed
    assert commits(data) == [f"step-000000{step}/COMPLETE-a1" for step in (20, 30, 40)]
    assert_every_rank_s_shard(data, 30, world_size=2)


async def test_a_stale_attempt_is_refused_on_every_rank_when_it_saves(
    controller: Any,
    jobs: Jobs,
    namespace: str,
    s3: tuple[str, Path],
    dev_cluster: DevCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While attempt 1 trains, a newer attempt of the job starts on its location (recorded in the fence,
    as its rank 0 does first thing): attempt 1's next sharded save is refused on every rank before it
    writes (``FencedOff``, exit 86), and it commits nothing more. Started again, attempt 1 is refused on
    every rank as it resumes."""
    location, data = s3
    args = ("--steps=40", "--checkpoint-every=10", "--step-seconds=0.5")
    await jobs.create(fsdp_job("stale", *args, workers=1, annotations=opted_in(location)))

    async def first_commit() -> bool:
        return commits(data) == ["step-00000010/COMPLETE-a1"]

    await eventually(first_commit, timeout=180, interval=0.2, what="the commit of step 10")
    store = dev_cluster.object_store()
    assert store is not None
    for name, value in store.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KUBETRAIN_LINEAGE", raising=False)
    await asyncio.to_thread(CheckpointManager(location, attempt=2).start)  # 5 s before step 20's save

    failed = await jobs.wait_condition("stale", "Failed", timeout=120)
    message = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["message"]
    assert "a newer attempt of the job owns its checkpoint directory" in message, message
    codes = await eventually(
        lambda: exit_codes(jobs, "stale"), timeout=60, what="the pods of attempt 1 to end"
    )
    assert set(codes.values()) == {86}, (codes, message)
    report = await report_of(jobs, "stale")
    assert report["status"] == "fenced" and report["fenced_by"] == "2", report
    assert report["last_checkpoint"] == f"{location}/step-00000010", report
    assert commits(data) == ["step-00000010/COMPLETE-a1"]
    assert not list(data.glob("step-00000020/*")), "the stale attempt wrote step 20"

    # attempt 1 started again (a pod its node runs again, say): it stops as it resumes, on every rank
    await jobs.create(fsdp_job("stale-again", *args, workers=1, annotations=opted_in(location)))
    await jobs.wait_condition("stale-again", "Failed", timeout=180)
    codes = await eventually(lambda: exit_codes(jobs, "stale-again"), timeout=60, what="its pods to end")
    assert set(codes.values()) == {86}, codes
    report = await report_of(jobs, "stale-again")
    assert report["status"] == "fenced" and report["fenced_by"] == "2" and report["step"] is None, report
    assert commits(data) == ["step-00000010/COMPLETE-a1"]


async def test_a_sharded_checkpoint_resumes_in_a_job_with_fewer_workers(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, s3: tuple[str, Path]
) -> None:
    """Three ranks save to step 20 and succeed; the job resubmitted (attempt 2, same location) with two
    ranks continues from step 20 with the same state (DCP reshards), and commits in its own world size."""
    location, data = s3
    await jobs.create(fsdp_job("wide", "--steps=20", workers=2, annotations=opted_in(location)))
    done = await jobs.wait_condition("wide", "Succeeded", timeout=240)
    report = await report_of(jobs, "wide")
    assert report["status"] == "completed" and report["step"] == 20, report
    assert report["last_checkpoint"] == f"{location}/step-00000020", report
    assert done["metadata"]["annotations"]["kubetrain.dev/last-checkpoint"] == report["last_checkpoint"]
    assert_every_rank_s_shard(data, 20, world_size=3)
    saved = staged(await logs(core, namespace, "wide-master-0"))

    resubmitted = {
        **opted_in(location),
        "kubetrain.dev/attempt": "2",
        "kubetrain.dev/last-checkpoint": report["last_checkpoint"],
    }
    await jobs.create(fsdp_job("narrow", "--steps=30", workers=1, annotations=resubmitted))
    await jobs.wait_condition("narrow", "Succeeded", timeout=240)
    report = await report_of(jobs, "narrow")
    assert report["resumed_from_step"] == 20 and report["step"] == 30, report
    assert report["last_checkpoint"] == f"{location}/step-00000030", report
    [resumed] = RESUMED.findall(await logs(core, namespace, "narrow-master-0"))
    assert resumed == ("20", "2", saved[20]), "two ranks did not resume from the state three saved"
    assert_every_rank_s_shard(data, 30, world_size=2)


async def test_a_trainjob_of_two_nodes_of_two_processes_saves_every_rank_s_shard(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, s3: tuple[str, Path]
) -> None:
    """torchrun on two nodes, two processes each: four ranks stage, upload and commit sharded saves in
    the background; the TrainJob completes reporting its last committed step."""
    location, data = s3
    runtime = runtime_from_example("fsdp-local")
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["containers"][0]
    # the command docs/checkpoints.md shows, as written; torchrun gets the nodes and processes from the
    # TrainJob (the controller's rendezvous env)
    container.update(
        command=documented("docs/checkpoints.md", "torchrun examples/train_fsdp.py").split(),
        args=[],
        env=POD_ENV,
    )
    await jobs.create(runtime)
    await jobs.create(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": TJ,
            "metadata": {"name": "fsdp", "annotations": opted_in(location)},
            "spec": {
                "runtimeRef": {"name": "fsdp-local", "kind": "TrainingRuntime"},
                "trainer": {"numNodes": 2, "numProcPerNode": 2},
            },
        }
    )
    await jobs.wait_condition("fsdp", "Complete", kind=TJ, timeout=300)
    report = await report_of(jobs, "fsdp", kind=TJ)
    assert report["status"] == "completed" and report["step"] == 20, report
    assert report["last_checkpoint"] == f"{location}/step-00000020", report
    assert commits(data) == ["step-00000010/COMPLETE-a1", "step-00000020/COMPLETE-a1"]
    assert_every_rank_s_shard(data, 20, world_size=4)
    node_1 = await logs(core, namespace, await _pod(jobs, "fsdp", 1))
    assert "[rank 3] checkpoint committed step=20" in node_1, node_1[-800:]
