"""The Kueue tests run on a cluster started with ``--kueue``: Kueue's real manager admits, holds and
preempts the jobs, and the test's own kubetrain controller runs them.

They use the cluster of ``KUBETRAIN_TEST_CLUSTER`` when it was started with ``--kueue``,
``--kueue-pods-ready-timeout`` and ``--kueue-worker-lost-timeout``, and otherwise start one in a
temporary state dir (stopped at the end). Without a Kueue build (``kubetrain dev
build`` makes one) they are skipped, saying so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kubetrain.devcluster import build
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.devcluster.errors import DevClusterError
from tests.conftest import Kubectl
from tests.docs_commands import run_documented, shell_env
from tests.support import running_cluster_with

# What the tests' jobs need: 16 simulated GPUs (the gpus ClusterQueue's quota), the process node,
# Kueue's waitForPodsReady (a job must be Running within 30 s of admission, or it is requeued), and,
# as MultiKueue's manager, a short workerLostTimeout (a job on a lost worker is dispatched again 5 s
# after its admission there at the earliest).
OPTIONS = ClusterOptions(
    gpu_nodes=2,
    gpus_per_node=8,
    cpu_nodes=1,
    kueue=True,
    kueue_pods_ready_timeout=30,
    kueue_worker_lost_timeout=5,
)


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A running local cluster with Kueue."""
    try:
        build.binary_path("kueue")
    except DevClusterError as exc:
        pytest.skip(f"Kueue is not built, so its tests cannot run: {exc}")
    reuse = os.environ.get("KUBETRAIN_TEST_CLUSTER")
    reused = (
        running_cluster_with(reuse, "kueue_pods_ready_timeout", "kueue_worker_lost_timeout")
        if reuse
        else None
    )
    if reused is not None:
        yield reused
        return
    cluster = DevCluster(tmp_path_factory.mktemp("kueue-cluster") / "state")
    cluster.up(OPTIONS)
    yield cluster
    cluster.down()


@pytest.fixture(scope="session")
def cluster_queues(dev_cluster: DevCluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The flavors, ClusterQueues and priorities of examples/kueue, applied as docs/kueue.md says."""
    env = shell_env(dev_cluster.kubeconfig, "default", tmp_path_factory.mktemp("shell"))
    run_documented("docs/kueue.md", "kubectl apply -f examples/kueue/cluster-queues.yaml", env=env)


@pytest.fixture
def queues(cluster_queues: None, kubectl: Kubectl, namespace: str, shell: dict[str, str]) -> str:
    """The LocalQueues of examples/kueue in the test's namespace; returns the namespace."""
    run_documented(
        "docs/kueue.md",
        "kubectl apply -n team-a -f examples/kueue/local-queues.yaml",
        env=shell,
        replace={"team-a": namespace},
    )
    return namespace
