"""Shared fixtures: one real local cluster per test session, a fresh namespace per test.

Integration and e2e tests talk to a real kube-apiserver. By default the session
starts its own cluster in a temporary state dir and stops it at the end. Set
``KUBETRAIN_TEST_CLUSTER`` to a state dir to reuse a cluster across sessions
(it is started there when not yet up, and left running), e.g. the one from
``kubetrain dev up``: ``KUBETRAIN_TEST_CLUSTER=~/.cache/kubetrain/dev-cluster``.

Tests are marked by the directory they live in (unit/, integration/, e2e/), so
``pytest -m unit`` runs without any cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from kubetrain.devcluster import build
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from tests.docs_commands import documented, run_documented, run_documented_async, shell_env
from tests.support import ControllerHandle, Jobs, start_controller_process, wait_controller_started

REPO = Path(__file__).resolve().parent.parent
pytest_plugins = ["tests.teardown_on_signal"]  # SIGTERM tears the fixtures down, as Ctrl-C does
# What the walkthrough fixture gives: (doc, *command prefixes) -> the finished shell
Walkthrough = Callable[..., Awaitable[subprocess.CompletedProcess[str]]]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is not installed
        return False


# The Airflow, KFP and upstream SDK tests run in virtual environments of their own (make test runs
# them all).
collect_ignore_glob = [
    *([] if _installed("airflow") else ["airflow/*"]),
    *([] if _installed("kfp") else ["kfp/*"]),
    *([] if _installed("kubeflow.training") and _installed("kubeflow.trainer") else ["sdk/*"]),
]


KUEUE_TESTS = REPO / "tests" / "kueue"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/kueue runs on a cluster of its own (started with --kueue), so only when asked for by
    path (``pytest tests/kueue``, as make test does): the session's fixtures hold one cluster."""
    if collection_path != KUEUE_TESTS:
        return None
    asked = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    return not any(path == KUEUE_TESTS or KUEUE_TESTS in path.parents for path in asked)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(REPO / "tests").parts[0]
        if tier in ("unit", "integration", "e2e", "faults", "kueue"):
            item.add_marker(getattr(pytest.mark, tier))


_session_cluster: list[DevCluster] = []  # the dev_cluster fixture's, once a test asked for it


@pytest.fixture(scope="session")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A running local cluster with simulated GPU and CPU nodes."""
    reuse = os.environ.get("KUBETRAIN_TEST_CLUSTER")
    cluster = DevCluster(Path(reuse).expanduser() if reuse else tmp_path_factory.mktemp("cluster") / "state")
    if not cluster.is_up():
        if cluster.load_state() is not None:
            cluster.down()
        cluster.up(ClusterOptions(gpu_nodes=2, gpus_per_node=8, cpu_nodes=2, object_store=True))
    _session_cluster.append(cluster)
    yield cluster
    _session_cluster.remove(cluster)
    if not reuse:
        cluster.down()


LOG_LINES_SHOWN = 30


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """After a failure, stop the session if a component of its cluster is down: every later test
    would fail too, each after its own timeout, and say nothing of why. The component's log says."""
    if not report.failed or not _session_cluster:
        return
    cluster = _session_cluster[0]
    down = [status.name for status in cluster.status() if not status.healthy]
    if down:
        tails = []
        for name in down:
            path = cluster.log_path(name)
            lines = path.read_text(errors="replace").splitlines()[-LOG_LINES_SHOWN:] if path.exists() else []
            tails.append(f"--- the last lines of {path}:\n" + "\n".join(lines))
        pytest.exit(
            f"the dev cluster lost {', '.join(down)} during {report.nodeid}\n" + "\n".join(tails),
            returncode=1,
        )


@pytest.fixture(scope="session")
def kubeconfig(dev_cluster: DevCluster) -> Path:
    return dev_cluster.kubeconfig


@pytest.fixture(scope="session")
async def api_client(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        yield api


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
async def namespace(core: client.CoreV1Api) -> AsyncIterator[str]:
    """A fresh namespace whose default service account exists, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    await core.create_namespace({"metadata": {"name": name, "labels": {"kubetrain.dev/test": "true"}}})
    for _ in range(150):
        accounts = await core.list_namespaced_service_account(name)
        if any(sa.metadata.name == "default" for sa in accounts.items):
            break
        await asyncio.sleep(0.1)
    yield name
    await core.delete_namespace(name)


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    return Kubectl(kubeconfig)


class Kubectl:
    """The dev cluster's own kubectl, bound to its kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.binary = str(build.binary_path("kubectl"))
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        # A fresh discovery cache per call: CRDs installed a moment ago must be visible at once.
        with tempfile.TemporaryDirectory() as cache:
            proc = subprocess.run(
                [self.binary, f"--cache-dir={cache}", *args],
                input=input,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc


@pytest.fixture
def shell(kubeconfig: Path, namespace: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a user's shell in this test's namespace, for running documented commands."""
    return shell_env(kubeconfig, namespace, tmp_path)


@pytest.fixture
def walkthrough(controller: ControllerHandle, shell: dict[str, str]) -> Walkthrough:
    """Runs a doc's commands as written, in a user's shell on the test's namespace; the cluster, the
    CRDs and the controller the doc has the user set up first are the fixtures'."""

    async def run(doc: str, *prefixes: str) -> subprocess.CompletedProcess[str]:
        return await run_documented_async(doc, *prefixes, env=shell, timeout=600)

    return run


@pytest.fixture(scope="session")
def crds(kubectl: Kubectl, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Install deploy/crds as the docs say (server-side apply: the CRDs are too big for client-side)."""
    env = shell_env(kubeconfig, "default", tmp_path_factory.mktemp("shell"))
    run_documented("docs/crds.md", "kubectl apply --server-side -f deploy/crds/", env=env)
    same = {
        documented("docs/controller.md", "kubectl apply --server-side -f deploy/crds"),
        documented("docs/process-node.md", "kubectl apply --server-side -f deploy/crds"),
        documented("docs/trainjob.md", "kubectl apply --server-side -f deploy/crds"),
    }
    assert {c.rstrip("/") for c in same} == {"kubectl apply --server-side -f deploy/crds"}, same
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(REPO / "deploy" / "crds"))


@pytest.fixture(scope="session")
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def jobs(custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> Jobs:
    return Jobs(custom, core, namespace)


@pytest.fixture
async def start_controller(kubeconfig: Path, namespace: str, crds: None) -> AsyncIterator[Any]:
    """Start an in-process controller scoped to the test's namespace (options as keyword arguments;
    ``via``: another kubeconfig to talk through, such as the fault proxy's)."""
    async with contextlib.AsyncExitStack() as started:

        async def start(via: Path | None = None, **overrides: Any) -> ControllerHandle:
            handle = ControllerHandle(via or kubeconfig, namespace=namespace, **overrides)
            await handle.start()
            started.push_async_callback(handle.stop)
            return handle

        yield start


@pytest.fixture
async def controller(start_controller: Any) -> ControllerHandle:
    """The controller with default options, for this test's namespace."""
    handle: ControllerHandle = await start_controller()
    return handle


@pytest.fixture
def controller_process(kubeconfig: Path, namespace: str, crds: None, tmp_path: Path) -> Iterator[Path]:
    """The controller as a process of its own, for this namespace: for tests whose code blocks the
    main thread (Airflow's dag.test(), kfp.local runs)."""
    log = tmp_path / "controller.log"
    proc = start_controller_process(kubeconfig, namespace, log)
    wait_controller_started(proc, log)
    yield log
    proc.terminate()
    proc.wait(30)
