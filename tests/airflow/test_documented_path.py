"""docs/airflow.md's steps, followed literally from a fresh shell: create the Airflow environments,
activate ``.venv-airflow``, ``kubetrain dev up``, ``kubetrain dev controller``, ``kubetrain dev airflow
up``; then an example DAG trains for real on the process node and succeeds.

The cluster used to run its pods with the Python that started it: started from ``.venv-airflow``
(no torch), as these steps do, every training pod failed with ``No module named 'torch'``. This test
starts a cluster of its own (the rest of the suite shares one started from ``.venv``), so it runs
under Airflow 3 only.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.devcluster.airflow_deploy import AirflowDeployment
from kubetrain.devcluster.cluster import DevCluster
from kubetrain.devcluster.processnode import interpreter
from tests.airflow.deployment.conftest import Runs
from tests.airflow.deployment.harness import until
from tests.docs_commands import REPO, run_documented

pytestmark = [pytest.mark.e2e, pytest.mark.main_airflow_only]
DAG = "train_and_evaluate"  # real training: two ranks of examples/train_ddp.py, then an evaluation


def fresh_shell(state: Path) -> dict[str, str]:
    """A user's shell: no virtual environment active, the dev cluster's state in ``state``."""
    venvs = {str(REPO / name / "bin") for name in os.listdir(REPO) if name.startswith(".venv")}
    path = [
        p
        for p in os.environ["PATH"].split(os.pathsep)
        if p not in venvs and p != str(Path(sys.executable).parent)
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "KUBECONFIG")}
    return {**env, "PATH": os.pathsep.join(path), "KUBETRAIN_DEV_STATE": str(state)}


@pytest.fixture
def documented_cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, str]]:
    """The cluster and Airflow deployment docs/airflow.md starts; the output of its status commands."""
    state = tmp_path / "state"
    cluster = DevCluster(state)
    try:
        done = run_documented(
            "docs/airflow.md",
            "make airflow-venvs",
            "source .venv-airflow/bin/activate",
            "kubetrain dev up",
            "kubetrain dev controller",
            "kubetrain dev airflow up",
            "kubetrain dev airflow status",
            env=fresh_shell(state),
            replace={"kubetrain dev airflow status": "kubetrain dev status && kubetrain dev airflow status"},
            timeout=900,
        )
        yield cluster, done.stdout
    finally:
        try:
            run_documented(
                "docs/airflow.md",
                "source .venv-airflow/bin/activate",
                "kubetrain dev airflow down",
                env=fresh_shell(state),
                timeout=120,
            )
        finally:
            cluster.down()


def test_the_documented_steps_run_an_example_dag_to_success(
    documented_cluster: tuple[DevCluster, str],
) -> None:
    cluster, status = documented_cluster
    said = [line for line in status.splitlines() if line.startswith("pods on the process node run with ")]
    assert said, status
    pod_python = said[0].removeprefix("pods on the process node run with ").strip()
    assert interpreter.has_training_modules(pod_python), f"pods run with {pod_python}, which cannot train"
    assert cluster.pod_python() == pod_python
    deployment = AirflowDeployment(cluster.state_dir / "airflow")
    api = deployment.api()
    runs = Runs(api, deployment.layout.home / "logs")
    until(lambda: api.dag(DAG), 300, f"the DAG {DAG} to be parsed")
    run_id = f"docs-{uuid.uuid4().hex[:8]}"
    api.trigger(DAG, run_id)
    assert runs.wait(DAG, run_id, timeout=600) == "success", runs.logs(DAG, run_id)
    accuracy = api.xcom(DAG, run_id, "evaluate")
    assert float(accuracy) >= 0.8, accuracy
