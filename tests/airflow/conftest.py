"""Airflow for the tests: a throw-away AIRFLOW_HOME with a SQLite metadata DB and the example DAGs.

Airflow reads its configuration when it is first imported, so the environment
is set here, before any test module imports it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs_commands import documented

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dags"))  # as the DAG processor does for the DAGs folder
HOME = Path(tempfile.mkdtemp(prefix="kubetrain-airflow-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME}/airflow.db",
    }
)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
    )
    return HOME


@pytest.fixture(scope="session")
def kubernetes_connection(kubeconfig: Path) -> Iterator[None]:
    """The cncf.kubernetes ``kubernetes_default`` connection, pointing at the dev cluster, set as
    docs/airflow.md sets it."""
    command = documented("docs/airflow.md", "export AIRFLOW_CONN_KUBERNETES_DEFAULT=")
    name, _, value = shlex.split(command.removeprefix("export "))[0].partition("=")
    os.environ[name] = value.replace("/path/to/kubeconfig", str(kubeconfig))
    yield
    os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)


@pytest.fixture
def dag_namespace(namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The example DAGs run in this test's namespace."""
    monkeypatch.setenv("KUBETRAIN_NAMESPACE", namespace)
    return namespace


def load_dag(dag_id: str) -> Any:
    """A fresh copy of an example DAG (its module is imported again, so it sees the current env)."""
    from kubetrain.operators.compat import DagBag

    sys.modules.pop("_local", None)  # the DAGs' shared settings module reads the env when imported
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


@pytest.fixture
def sync_jobs(kubeconfig: Path) -> Iterator[Any]:
    from kubetrain.client import JobClient

    with JobClient.connect(kubeconfig=str(kubeconfig)) as client:
        yield client
