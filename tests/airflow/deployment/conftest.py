"""One real Airflow deployment for this package of tests: Postgres, the API server (webserver on
2.11), scheduler with the LocalExecutor, DAG processor and triggerer, started with ``kubetrain dev
airflow up`` as docs/airflow.md says, beside the test cluster.

The deployment is started once for the package (a start is half a minute of two busy cores) and
stopped after its last test. Its DAG folder holds the repository's example DAGs and the DAGs of
these tests (``dags/``: jobs whose pods kwok simulates, shaped by ``dag_run.conf``); its processes
train in one namespace, where a controller runs. Every request of the deployment to the cluster goes
through a recording proxy, so tests count what the triggerer asks of the API server.
"""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain.devcluster import process
from kubetrain.devcluster.airflow_api import TERMINAL_RUN_STATES, AirflowApi, AirflowApiError
from kubetrain.devcluster.airflow_deploy import AirflowDeployment
from kubetrain.devcluster.airflow_state import AirflowState
from kubetrain.devcluster.cluster import DevCluster
from tests.airflow.deployment.harness import EXAMPLE_DAGS, TEST_DAGS, RecordingProxy, dag_folder, until
from tests.docs_commands import documented, shell_env
from tests.support import start_controller_process, wait_controller_started


@pytest.fixture(scope="package")
def airflow_namespace(kubectl: Any, crds: None) -> Iterator[str]:
    """Where the deployment's DAGs train, with the claim the retry example resumes from."""
    name = f"af-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    kubectl("label", "namespace", name, "kubetrain.dev/test=true")
    claim = (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: retry-with-resume}\n"
        "spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}\n"
    )
    kubectl("apply", "-n", name, "-f", "-", input=claim)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="package")
def airflow_controller(
    kubeconfig: Path, airflow_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    log = tmp_path_factory.mktemp("controller") / "controller.log"
    proc = start_controller_process(kubeconfig, airflow_namespace, log)
    try:  # stopped also when the run is interrupted before the controller is up
        wait_controller_started(proc, log)
        yield log
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="package")
def recording_proxy(kubeconfig: Path) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(kubeconfig)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="package")
def deployment(
    dev_cluster: DevCluster,
    kubeconfig: Path,
    airflow_namespace: str,
    airflow_controller: Path,
    recording_proxy: RecordingProxy,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AirflowDeployment]:
    """``kubetrain dev airflow up`` as docs/airflow.md runs it, with this session's DAG folder, namespace
    and (through the proxy) kubeconfig; ``down`` at the end."""
    work = tmp_path_factory.mktemp("airflow")
    dags = dag_folder(work / "dags")
    proxied = recording_proxy.proxy.write_kubeconfig(work / "proxied.kubeconfig")
    root = work / "deployment"
    env = shell_env(kubeconfig, airflow_namespace, work)
    up = documented("docs/airflow.md", "kubetrain dev airflow up")
    argv = [
        *shlex.split(up),
        f"--state-dir={dev_cluster.state_dir}",
        f"--airflow-dir={root}",
        f"--dags-folder={dags}",
        f"--namespace={airflow_namespace}",
        f"--kubeconfig={proxied}",
    ]
    started = time.monotonic()
    deployed = AirflowDeployment(root)
    down = documented("docs/airflow.md", "kubetrain dev airflow down")
    try:  # an interrupted start (SIGTERM, Ctrl-C) stops what it had started too
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{up} failed:\n{done.stdout}\n{done.stderr[-5000:]}"
        api = deployed.api()
        until(lambda: all(api.dag(d) for d in (*EXAMPLE_DAGS, *TEST_DAGS)), 300, "the DAGs to be parsed")
        print(f"\nAirflow deployment up and its DAGs parsed in {time.monotonic() - started:.0f}s")
        yield deployed
    finally:
        pids = (deployed.load_state() or AirflowState(0, "", {}, {}, {}, "")).pids
        subprocess.run([*shlex.split(down), f"--airflow-dir={root}"], env=env, timeout=120, check=True)
    left = {name: pid for name, pid in pids.items() if process.pid_alive(pid)}
    assert not left and not root.exists(), f"`{down}` left {left} running"


@pytest.fixture(scope="package")
def api(deployment: AirflowDeployment) -> AirflowApi:
    return deployment.api()


class Runs:
    """DAG runs triggered through the REST API, as a user triggers them."""

    def __init__(self, api: AirflowApi, logs: Path) -> None:
        self.api = api
        self.logs_dir = logs

    def logs(self, dag_id: str, run_id: str, tail: int = 4000) -> str:
        """The end of every task and trigger log of a run, for assertion messages."""
        found = sorted((self.logs_dir / f"dag_id={dag_id}" / f"run_id={run_id}").rglob("*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in found)

    def trigger(self, dag_id: str, **conf: Any) -> str:
        run_id = f"t-{uuid.uuid4().hex[:10]}"
        self.api.trigger(dag_id, run_id, conf)
        return run_id

    def wait(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        def finished() -> str | None:
            state = str(self.api.dag_run(dag_id, run_id)["state"])
            return state if state in TERMINAL_RUN_STATES else None

        return str(until(finished, timeout, f"DAG run {dag_id}/{run_id} to finish", interval=2))

    def ti(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
        return self.api.task_instance(dag_id, run_id, task_id, map_index)

    def wait_ti(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: tuple[str, ...],
        timeout: float = 300,
        map_index: int = -1,
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            try:
                ti = self.ti(dag_id, run_id, task_id, map_index)
            except AirflowApiError as exc:
                if exc.status == 404:  # not created yet (a mapped task before its expansion)
                    return None
                raise
            return ti if ti["state"] in states else None

        found: dict[str, Any] = until(reached, timeout, f"{dag_id}.{task_id} to be {'/'.join(states)}", 0.5)
        return found


@pytest.fixture(scope="package")
def runs(api: AirflowApi, deployment: AirflowDeployment) -> Runs:
    return Runs(api, deployment.layout.home / "logs")


@pytest.fixture(scope="package")
def database(deployment: AirflowDeployment) -> Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Queries of the deployment's metadata database."""
    import psycopg2

    url = deployment.database_url()

    def query(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg2.connect(url) as conn, conn.cursor() as cursor:
            cursor.execute(sql, args)
            return list(cursor.fetchall())

    return query
