"""MultiKueue with two local clusters: a job created on the manager runs on the worker. The manager's
kubetrain leaves the job (``managedBy: kueue.x-k8s.io/multikueue``) alone, creating no pod and
writing no status; Kueue mirrors the worker's status back, and deleting the job on the manager
deletes the worker's copy."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from kubetrain import naming
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from tests.conftest import Kubectl
from tests.docs_commands import run_documented, shell_env
from tests.kueue.test_admission import gpu_job, queued
from tests.support import HANG, Jobs, eventually, training_runtime, trainjob

TJ = "TrainJob"
UPSTREAM_STATUS = ("conditions", "jobsStatus")


@pytest.fixture(scope="module")
def worker(cluster_queues: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A second cluster with Kueue: MultiKueue's worker."""
    cluster = DevCluster(tmp_path_factory.mktemp("worker") / "state")
    cluster.up(ClusterOptions(gpu_nodes=2, gpus_per_node=8, cpu_nodes=1, kueue=True, process_node=False))
    yield cluster
    cluster.down()


@pytest.fixture
async def worker_jobs(worker: DevCluster, namespace: str) -> AsyncIterator[Jobs]:
    """The test's namespace on the worker (the documented commands create it)."""
    api = await config.new_client_from_config(config_file=str(worker.kubeconfig))
    async with api:
        yield Jobs(client.CustomObjectsApi(api), client.CoreV1Api(api), namespace)


def set_up_worker(worker: DevCluster, namespace: str, env: dict[str, str]) -> None:
    """Give the worker what docs/kueue.md says: the queues, and the namespace ``namespace``."""
    run_documented(
        "docs/kueue.md",
        "WORKER=",
        "kubectl --kubeconfig $WORKER/kubeconfig apply -f",
        "kubectl --kubeconfig $WORKER/kubeconfig create namespace",
        "kubectl --kubeconfig $WORKER/kubeconfig apply -n",
        env=env,
        replace={"/tmp/worker": str(worker.state_dir), "team-a": namespace},
    )


def _pair(manager: Path, worker: DevCluster, namespace: str, tmp_path: Path) -> None:
    """Point the manager's Kueue at the worker, as docs/kueue.md says, for ``namespace``."""
    env = shell_env(manager, namespace, tmp_path)
    set_up_worker(worker, namespace, env)
    run_documented(
        "docs/kueue.md",
        "WORKER=",
        'sed "s|WORKER_KUBECONFIG',
        env=env,
        replace={"/tmp/worker": str(worker.state_dir), "team-a": namespace},
    )
    Kubectl(manager)("wait", "--for=condition=Active", "--timeout=60s", "multikueuecluster/worker")


@pytest.fixture
async def paired(
    controller: Any,
    start_controller: Any,
    worker: DevCluster,
    namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """The manager's and the worker's kubetrain for the test's namespace, and the manager's Kueue
    pointed at the worker."""
    await start_controller(via=worker.kubeconfig)
    _pair(kubeconfig, worker, namespace, tmp_path)


async def test_a_job_queued_on_the_manager_runs_on_the_worker(
    paired: None, jobs: Jobs, worker_jobs: Jobs
) -> None:
    created = time.monotonic()
    job = await jobs.create(queued(gpu_job("remote", gpus_per_pod=8, annotations=HANG), queue="multikueue"))
    assert job["spec"]["runPolicy"]["managedBy"] == naming.MANAGED_BY_MULTIKUEUE  # Kueue's webhook
    await worker_jobs.wait_pods("remote", 2, phase="Running", timeout=90)
    on_worker = time.monotonic() - created
    mirrored = await jobs.wait_condition("remote", "Running", timeout=60)
    assert await jobs.pods("remote") == []  # the manager's kubetrain made none
    worker_copy = await worker_jobs.get("remote")
    assert worker_copy is not None
    assert mirrored["status"]["conditions"] == worker_copy["status"]["conditions"]
    reasons = {reason for _, reason, _ in await jobs.events("remote")}
    assert not {"PyTorchJobCreated", "SuccessfulCreatePod"} & reasons  # nothing from the manager's kubetrain

    await jobs.delete("remote")
    await eventually(lambda: _gone(worker_jobs, "remote"), timeout=60, what="the worker's copy to be deleted")
    print(f"created on the manager to pods Running on the worker: {on_worker:.1f}s")


async def test_a_trainjob_queued_on_the_manager_runs_on_the_worker(
    paired: None, jobs: Jobs, worker_jobs: Jobs
) -> None:
    for side in (jobs, worker_jobs):  # Kueue reads the runtime on both sides
        await side.create(training_runtime("torch", pod_annotations=HANG))

    gpus = {"limits": {"nvidia.com/gpu": "4"}}
    job = await jobs.create(
        queued(
            trainjob("remote", "torch", trainer={"numNodes": 2, "resourcesPerNode": gpus}), queue="multikueue"
        )
    )
    assert job["spec"]["managedBy"] == naming.MANAGED_BY_MULTIKUEUE
    await worker_jobs.wait_trainjob_pods("remote", 2, phase="Running", timeout=90)
    assert await jobs.trainjob_pods("remote") == []
    worker_copy = await worker_jobs.get("remote", TJ)
    assert worker_copy is not None and worker_copy["spec"].get("managedBy") != naming.MANAGED_BY_MULTIKUEUE

    async def mirrored() -> dict[str, Any] | None:
        # Kueue copies the status through Trainer's Go types: the upstream fields, not kubetrain's own
        # bookkeeping (jobStartTimes and the like), which only the worker's kubetrain reads.
        manager_side, worker_side = await jobs.get("remote", TJ), await worker_jobs.get("remote", TJ)
        status = (manager_side or {}).get("status") or {}
        upstream = {
            k: v for k, v in ((worker_side or {}).get("status") or {}).items() if k in UPSTREAM_STATUS
        }
        return manager_side if status.get("jobsStatus") and status == upstream else None

    await eventually(mirrored, timeout=60, what="the worker's TrainJob status on the manager")
    await jobs.delete("remote", TJ)
    await eventually(
        lambda: _gone(worker_jobs, "remote", TJ), timeout=60, what="the worker's copy to be deleted"
    )


async def _gone(jobs: Jobs, name: str, kind: str = "PyTorchJob") -> bool:
    pods = await (jobs.trainjob_pods(name) if kind == TJ else jobs.pods(name))
    return await jobs.get(name, kind) is None and not pods
