"""``kubetrain dev down`` stops the Airflow deployments started beside the cluster wherever their
directory is (``--airflow-dir``), and never touches a noted directory that holds no deployment now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubetrain.devcluster import process
from kubetrain.devcluster.airflow_deploy import AirflowDeployment
from kubetrain.devcluster.airflow_state import AirflowState
from kubetrain.devcluster.cluster import DevCluster


def started(root: Path) -> subprocess.Popen[bytes]:
    """A deployment in ``root`` whose one process sleeps, as `kubetrain dev airflow up` records one."""
    root.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    AirflowDeployment(root)._save(
        AirflowState(3, sys.executable, {}, {}, {}, "", pids={"scheduler": sleeper.pid})
    )
    return sleeper


def test_down_stops_a_deployment_started_in_a_directory_of_its_own(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "cluster")
    cluster.state_dir.mkdir()
    elsewhere, reused = tmp_path / "airflow-elsewhere", tmp_path / "reused"
    sleeper = started(elsewhere)
    cluster.add_deployment(elsewhere)
    cluster.add_deployment(elsewhere)  # noted once
    cluster.add_deployment(reused)
    reused.mkdir()
    (reused / "keep.txt").write_text("someone's files")
    assert cluster.deployments() == [(cluster.state_dir / "airflow").resolve(), elsewhere, reused]
    try:
        cluster.down()
        sleeper.wait(30)
        assert not process.pid_alive(sleeper.pid) and not elsewhere.exists()
        assert (reused / "keep.txt").exists(), "a noted directory without a deployment was removed"
        assert not cluster.state_dir.exists()
    finally:
        sleeper.kill()
