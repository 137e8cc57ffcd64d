"""The upstream SDKs' tests run on a cluster of their own, whose process node is the default node.

The SDKs' pods name no node, so they run for real only on a cluster started with
``--process-node-default``; the other suites rely on simulated nodes taking such pods, so this suite
does not share their cluster. It uses the one of ``KUBETRAIN_TEST_CLUSTER`` when that was started
with the option, and otherwise starts a small one (about 10 s) in a temporary state dir, stopped at
the end. That cluster's process node runs pods with this environment's interpreter (``make
sdk-venv`` puts torch in it), in a scratch working directory, as docs/upstream-sdks.md says to.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from tests.docs_commands import run_documented, shell_env
from tests.support import running_cluster_with


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A running local cluster where pods that name no node run on the process node."""
    reuse = os.environ.get("KUBETRAIN_TEST_CLUSTER")
    reused = running_cluster_with(reuse, "process_node_default") if reuse else None
    if reused is not None:
        yield reused
        return
    root = tmp_path_factory.mktemp("sdk-cluster")
    (root / "workdir").mkdir()
    cluster = DevCluster(root / "state")
    cluster.up(
        ClusterOptions(gpu_nodes=1, cpu_nodes=1, process_node_default=True, workdir=str(root / "workdir"))
    )
    yield cluster
    cluster.down()


@pytest.fixture(scope="session")
def sdk_cluster(dev_cluster: DevCluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What docs/upstream-sdks.md installs beside the CRDs: the runtimes and the ConfigMap the
    Trainer SDK reads when it connects."""
    env = shell_env(dev_cluster.kubeconfig, "default", tmp_path_factory.mktemp("shell"))
    run_documented(
        "docs/upstream-sdks.md",
        "export KUBECONFIG=",
        "kubectl apply --server-side -f deploy/crds/",
        "kubectl apply --server-side -k deploy/runtimes",
        "kubectl apply -f deploy/overlays/standalone/trainer-public.yaml",
        env=env,
        replace={"~/.cache/kubetrain/dev-cluster": str(dev_cluster.state_dir)},
    )
