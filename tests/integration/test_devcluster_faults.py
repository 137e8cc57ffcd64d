"""`kubetrain dev` faults end in one clear error line that says how to fix them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kubetrain.devcluster import build, openapi, process
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.devcluster.errors import DevClusterError


def _kubetrain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubetrain", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_second_up_reports_the_cluster_is_already_up(dev_cluster: DevCluster) -> None:
    proc = _kubetrain("dev", "up", "--state-dir", str(dev_cluster.state_dir))
    assert proc.returncode == 0, proc.stderr
    assert "already up" in proc.stderr


def test_status_lists_every_component_with_pid_and_port(dev_cluster: DevCluster) -> None:
    proc = _kubetrain("dev", "status", "--state-dir", str(dev_cluster.state_dir))
    assert proc.returncode == 0, proc.stderr
    state = dev_cluster.load_state()
    assert state is not None
    for name, pid in state.pids.items():
        assert name in proc.stdout and str(pid) in proc.stdout


def test_logs_prints_a_component_log(dev_cluster: DevCluster) -> None:
    proc = _kubetrain(
        "dev", "logs", "kube-apiserver", "--tail", "5", "--state-dir", str(dev_cluster.state_dir)
    )
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr


def test_restart_brings_back_a_component_that_died(dev_cluster: DevCluster) -> None:
    state = dev_cluster.load_state()
    assert state is not None
    process.kill(state.pids["kube-scheduler"])  # as a crash would
    assert not dev_cluster.is_up()
    proc = _kubetrain("dev", "restart", "kube-scheduler", "--state-dir", str(dev_cluster.state_dir))
    assert proc.returncode == 0, proc.stderr
    assert "Restarted kube-scheduler" in proc.stderr
    assert dev_cluster.is_up()
    assert all(c.healthy for c in dev_cluster.status() if c.running), dev_cluster.status()


def test_restart_of_one_component_refuses_when_another_is_down_too(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "state.json").write_text(
        json.dumps(
            {
                "ports": {"etcd": 1, "kwok": 2},
                "pids": {"etcd": dead.pid, "kwok": dead.pid},
                "options": {},
                "started_at": 0,
            }
        )
    )
    line = _error_line(_kubetrain("dev", "restart", "kwok", "--state-dir", str(tmp_path)))
    assert "cannot restart kwok alone" in line and "etcd" in line and "kubetrain dev down" in line


def test_a_stale_state_dir_is_reported_with_the_fix(tmp_path: Path) -> None:
    state_dir = tmp_path / "stale"
    state_dir.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state_dir / "state.json").write_text(
        json.dumps(
            {"ports": {"kube-apiserver": 1}, "pids": {"etcd": dead.pid}, "options": {}, "started_at": 0}
        )
    )
    line = _error_line(_kubetrain("dev", "up", "--no-build", "--state-dir", str(state_dir)))
    assert "stale state dir" in line and "kubetrain dev down" in line


def test_a_port_in_use_is_reported_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = _error_line(
            _kubetrain("dev", "up", "--no-build", "--port", str(port), "--state-dir", str(tmp_path / "s"))
        )
    assert f"port {port} is already in use" in line and "--port" in line


def test_a_missing_binary_is_reported_with_the_fix(tmp_path: Path) -> None:
    line = _error_line(
        _kubetrain(
            "dev",
            "up",
            "--no-build",
            "--state-dir",
            str(tmp_path / "s"),
            env={"KUBETRAIN_CACHE": str(tmp_path / "empty-cache")},
        )
    )
    assert "is not built" in line and "kubetrain dev build" in line


def test_no_go_toolchain_is_reported_with_the_fix(tmp_path: Path) -> None:
    line = _error_line(
        _kubetrain("dev", "build", env={"PATH": str(tmp_path), "KUBETRAIN_CACHE": str(tmp_path)})
    )
    assert "no Go toolchain" in line and "install Go" in line


def test_a_failed_build_names_the_binary_and_shows_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = build.GoTarget("broken", "k8s", "k8s.io/kubernetes/cmd/no-such-command")
    monkeypatch.setattr(build, "TARGETS", (broken,))
    monkeypatch.setattr(build, "BINARIES", ("broken",))
    monkeypatch.setenv("KUBETRAIN_CACHE", str(tmp_path))
    with pytest.raises(DevClusterError) as raised:
        build.build()
    assert str(raised.value).startswith("building broken failed")
    assert "no-such-command" in str(raised.value)


def test_a_component_that_dies_at_start_is_named_with_its_log(tmp_path: Path) -> None:
    component = process.Component(
        "flaky",
        ["sh", "-c", "echo listening failed: address in use; exit 3"],
        process.HealthCheck("http://127.0.0.1:9/healthz"),
        9,
        startup_timeout=10,
    )
    log = tmp_path / "flaky.log"
    proc = process.start(component, log)
    with pytest.raises(DevClusterError) as raised:
        process.wait_healthy(component, proc, log)
    assert "flaky exited with code 3" in str(raised.value)
    assert "address in use" in str(raised.value)


def test_a_failed_start_stops_what_was_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = DevCluster(tmp_path / "s")
    real = cluster._components

    def sabotage(ports: dict[str, int], options: ClusterOptions) -> list[process.Component]:
        components = real(ports, options)
        components[2].argv.append("--no-such-flag")  # the scheduler refuses to start
        return components

    monkeypatch.setattr(cluster, "_components", sabotage)
    with pytest.raises(DevClusterError) as raised:
        cluster.up(ClusterOptions(gpu_nodes=0, cpu_nodes=0))
    assert "kube-scheduler exited" in str(raised.value) and "no-such-flag" in str(raised.value)
    assert not cluster.state_dir.exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(cluster.state_dir) not in ps, "a component of the failed cluster is still running"


def test_the_embedded_kubernetes_schemas_match_the_api_server(dev_cluster: DevCluster) -> None:
    served = openapi.render(openapi.fetch(dev_cluster))
    assert openapi.committed_path().read_text() == served, "run `make k8s-openapi`"
