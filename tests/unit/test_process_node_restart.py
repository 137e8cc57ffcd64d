"""A process node started again after a crash: what the earlier run left is stopped, and its pods go
on as a kubelet's do after a reboot (the e2e test in tests/e2e/test_process_node.py kills a real one)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kubetrain.devcluster.cluster import DevCluster
from kubetrain.devcluster.processnode import containers
from kubetrain.devcluster.processnode.pods import ContainerState, carried_over


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        child.kill()
        child.wait()


def container(spawn: list[subprocess.Popen[bytes]], uid: str) -> psutil.Process:
    """A container process of pod ``uid`` in a session of its own, with a child of its own."""
    env = {**os.environ, containers.ENV_POD_UID: uid}
    child = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], env=env, start_new_session=True)
    spawn.append(child)
    process = psutil.Process(child.pid)
    for _ in range(100):
        if process.children():
            break
        time.sleep(0.05)
    return process


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_the_processes_of_this_nodes_pods_are_stopped_children_included(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    (tmp_path / "pod-a").mkdir()
    ours = container(spawn, "pod-a")
    grandchildren = ours.children()
    assert grandchildren, "the container's child never started"
    another_nodes = container(spawn, "pod-b")  # a pod of another node (another cluster) on this host
    stopped = containers.stop_leftovers(tmp_path)
    assert sorted(stopped) == sorted([ours.pid, *(c.pid for c in grandchildren)])
    spawn[0].wait(timeout=5)
    assert not any(alive(c) for c in grandchildren)
    assert alive(another_nodes)


def test_a_running_container_ended_unknown_and_keeps_its_restart_count() -> None:
    statuses = [
        {"name": "trainer", "restartCount": 2, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
        {
            "name": "sidecar",
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        },
        {"name": "late", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
    ]
    states = [ContainerState(name, "python") for name in ("trainer", "sidecar", "late", "new")]
    trainer, sidecar, late, new = carried_over(states, {s["name"]: s for s in statuses})
    restarts, ended = trainer
    assert restarts == 2 and ended is not None
    assert (ended["exitCode"], ended["reason"], ended["startedAt"]) == (
        containers.UNKNOWN_EXIT_CODE,
        "Unknown",
        "2026-01-01T00:00:00Z",
    )
    assert sidecar == (0, {"exitCode": 0, "reason": "Completed"})
    assert late == (1, None)
    assert new == (0, None)


def test_the_runs_of_an_earlier_node_are_found_by_their_logs_oldest_first(tmp_path: Path) -> None:
    for restarts in (0, 1, 10):
        (tmp_path / f"{restarts}.log").write_text(f"run {restarts}\n")
    runs = containers.earlier_runs(tmp_path)
    assert [run.log_path.name for run in runs] == ["0.log", "1.log", "10.log"]
    assert all(run.exit_code is not None for run in runs), "following such a log would never end"
    assert containers.earlier_runs(tmp_path / "never-ran") == []


def test_a_node_that_never_ran_a_pod_has_nothing_to_stop(tmp_path: Path) -> None:
    assert containers.stop_leftovers(tmp_path / "pods") == []


def test_dev_down_stops_the_containers_a_killed_process_node_left(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    cluster = DevCluster(tmp_path / "state")
    (cluster.process_node_dir / "pods" / "pod-a").mkdir(parents=True)
    left = container(spawn, "pod-a")
    assert cluster.down()
    spawn[0].wait(timeout=5)
    assert not alive(left) and not (tmp_path / "state").exists()
