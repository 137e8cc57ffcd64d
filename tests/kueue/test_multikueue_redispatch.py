"""MultiKueue re-dispatch: a manager with two workers. A training job the manager dispatched to one
worker stays there while only that worker's kubetrain is stopped (Kueue sees the worker's cluster,
not its controllers); when the worker's cluster goes away, the manager's Kueue dispatches the job
again to the other worker once its ``workerLostTimeout`` has passed, and the job resumes there from
the checkpoint directory both workers' process nodes mount."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from kubetrain import naming
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from tests.conftest import Kubectl
from tests.docs_commands import run_documented, shell_env
from tests.e2e.test_process_node_training import STEPS_LINE, logs
from tests.kueue.test_admission import queued
from tests.kueue.test_multikueue import set_up_worker
from tests.kueue.test_preemption_resume import single_rank
from tests.support import Jobs, eventually

# A worker runs the jobs on its process node only: no simulated nodes.
WORKER = ClusterOptions(gpu_nodes=0, cpu_nodes=0, kueue=True)
QUEUE = "multikueue-process-node"
POD = "resumable-master-0"
TRAIN = ["python", "examples/train_ddp.py", "--steps=200", "--checkpoint-every=10", "--step-seconds=0.1"]


@pytest.fixture(scope="module")
def workers(
    cluster_queues: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, DevCluster]]:
    """Two worker clusters with Kueue, started side by side."""
    clusters = {
        name: DevCluster(tmp_path_factory.mktemp(name) / "state") for name in ("worker-a", "worker-b")
    }
    try:
        with ThreadPoolExecutor(len(clusters)) as pool:
            list(pool.map(lambda cluster: cluster.up(WORKER), clusters.values()))
        yield clusters
    finally:
        for cluster in clusters.values():
            cluster.down()


class Worker:
    """One worker as the test sees it: its jobs and pods in the test's namespace."""

    def __init__(self, name: str, cluster: DevCluster, jobs: Jobs) -> None:
        self.name, self.cluster, self.jobs = name, cluster, jobs

    async def step(self) -> int:
        """The last training step the job's pod logged there (0 before it logs one)."""
        try:
            text = await logs(self.jobs.core, self.jobs.namespace, POD)
        except client.ApiException:
            return 0
        return max((int(m[2]) for m in STEPS_LINE.finditer(text)), default=0)


@pytest.fixture
async def worker_sides(workers: dict[str, DevCluster], namespace: str) -> AsyncIterator[dict[str, Worker]]:
    sides = {}
    apis = []
    for name, cluster in workers.items():
        api = await config.new_client_from_config(config_file=str(cluster.kubeconfig))
        apis.append(api)
        sides[name] = Worker(
            name, cluster, Jobs(client.CustomObjectsApi(api), client.CoreV1Api(api), namespace)
        )
    yield sides
    for api in apis:
        await api.close()


def _pair(manager: Path, workers: dict[str, DevCluster], namespace: str, tmp_path: Path) -> None:
    """Set up each worker and point the manager's Kueue at both, as docs/kueue.md says."""
    env = shell_env(manager, namespace, tmp_path)
    for cluster in workers.values():
        set_up_worker(cluster, namespace, env)
    run_documented(
        "docs/kueue.md",
        "WORKER_A=",
        'sed -e "s|WORKER_A_KUBECONFIG',
        env=env,
        replace={
            "/tmp/worker-a": str(workers["worker-a"].state_dir),
            "/tmp/worker-b": str(workers["worker-b"].state_dir),
            "team-a": namespace,
        },
    )
    for name in workers:
        Kubectl(manager)("wait", "--for=condition=Active", "--timeout=60s", f"multikueuecluster/{name}")


def _resumable(shared: Path) -> dict[str, Any]:
    """A one-rank training job that checkpoints into ``shared``, a host directory every process
    node mounts (hostPath), so whichever worker runs it finds the checkpoints of the one before."""
    job = queued(single_rank("resumable", TRAIN), queue=QUEUE)
    job["metadata"]["annotations"] = {naming.ANNOTATION_CHECKPOINT_DIR: "/checkpoints"}
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["volumes"] = [{"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "shared", "mountPath": "/checkpoints"}]
    return job


async def _workload(jobs: Jobs, job: str) -> dict[str, Any] | None:
    listed = await jobs.custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", jobs.namespace, "workloads"
    )
    owned = [
        w
        for w in listed["items"]
        if any(o["name"] == job for o in w["metadata"].get("ownerReferences") or [])
    ]
    return owned[0] if owned else None


async def _dispatched_to(jobs: Jobs, job: str) -> str | None:
    workload = await _workload(jobs, job)
    return ((workload or {}).get("status") or {}).get("clusterName")


async def test_a_job_on_a_lost_worker_is_dispatched_again_and_resumes_from_the_shared_checkpoint(
    controller: Any,
    start_controller: Any,
    workers: dict[str, DevCluster],
    worker_sides: dict[str, Worker],
    dev_cluster: DevCluster,
    namespace: str,
    kubeconfig: Path,
    jobs: Jobs,
    tmp_path: Path,
) -> None:
    state = dev_cluster.load_state()
    assert state is not None
    lost_timeout = state.options["kueue_worker_lost_timeout"]
    controllers = {name: await start_controller(via=c.kubeconfig) for name, c in workers.items()}
    _pair(kubeconfig, workers, namespace, tmp_path)
    shared = tmp_path / "checkpoints"
    shared.mkdir()

    await jobs.create(_resumable(shared))
    chosen = await eventually(
        lambda: _dispatched_to(jobs, "resumable"), timeout=90, what="a worker to admit it"
    )
    first, other = worker_sides[chosen], next(w for n, w in worker_sides.items() if n != chosen)
    await eventually(lambda: _past(first, 20), timeout=120, what=f"training on {chosen} past step 20")

    # Kueue watches the worker's cluster, not the controllers on it: with the worker's kubetrain
    # stopped, the job stays dispatched there (and its pod keeps training) past the timeout.
    await controllers[first.name].stop()
    before = await first.step()
    await asyncio.sleep(lost_timeout + 3)
    assert await _dispatched_to(jobs, "resumable") == first.name
    assert (await first.jobs.pods("resumable"))[0].status.phase == "Running"
    assert await first.step() > before
    assert await other.jobs.pods("resumable") == []

    lost = time.monotonic()
    down = asyncio.create_task(asyncio.to_thread(first.cluster.down))  # its processes go too
    await eventually(
        lambda: _dispatched_to_other(jobs, other.name), timeout=60, what=f"dispatch to {other.name}"
    )
    dispatched_after = time.monotonic() - lost
    await other.jobs.wait_pods("resumable", 1, phase="Running", timeout=120)
    running_after = time.monotonic() - lost
    await down
    stopped_at = max(
        int(p.name.removeprefix("step-")) for p in shared.iterdir() if p.name.startswith("step-")
    )

    done = await other.jobs.wait_condition("resumable", "Succeeded", timeout=180)
    report = json.loads(done["metadata"]["annotations"][naming.ANNOTATION_TRAINING_REPORT])
    assert report["step"] == 200 and report["resumed_from_step"] == stopped_at, (report, stopped_at)
    assert f"resumed from checkpoint step={stopped_at}" in await logs(other.jobs.core, namespace, POD)
    mirrored = await jobs.wait_condition("resumable", "Succeeded", timeout=60)
    assert await jobs.pods("resumable") == []  # the manager's kubetrain made none
    status_writers = {
        m["manager"] for m in mirrored["metadata"]["managedFields"] if m.get("subresource") == "status"
    }
    assert status_writers == {"kueue"}, status_writers  # nor wrote its status, before or after
    print(
        f"{first.name}'s cluster stopped: dispatched to {other.name} after {dispatched_after:.1f}s, "
        f"its pod Running after {running_after:.1f}s; resumed from step {stopped_at} of 200"
    )


async def _dispatched_to_other(jobs: Jobs, other: str) -> bool:
    return await _dispatched_to(jobs, "resumable") == other


async def _past(worker: Worker, step: int) -> bool:
    return await worker.step() >= step
