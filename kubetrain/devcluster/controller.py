"""``kubetrain dev controller``: kubetrain's CRDs and controller beside the local cluster.

A cluster from ``kubetrain dev up`` has no training kinds and no controller: the tests start a
controller of their own per namespace, so ``up`` starts none. A person who wants to run a job (the
Airflow example DAGs, the demo, a manifest of their own) needs both, and this is the one command for
it: the CRDs applied server-side and Established, then ``kubetrain controller run`` for every
namespace as a process beside the cluster (its log is ``kubetrain dev logs controller``; ``kubetrain
dev down`` stops it), with its status server on, so training on the process node reports progress
(``kubetrain list``'s PROGRESS column) as it does on a cluster installed from the manifests. It runs with the Python that runs this command, which has the controller extra
wherever ``kubetrain`` is installed for development (``.venv``, ``.venv-airflow``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rich.console import Console

from kubetrain.devcluster import paths, process
from kubetrain.devcluster.cluster import DevCluster
from kubetrain.devcluster.errors import DevClusterError

NAME = "controller"
STARTED = "controller started"  # what its log says once it serves


def install_crds(cluster: DevCluster) -> None:
    """Apply ``deploy/crds`` and wait until the API server serves every kind."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(paths.CRDS))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(paths.CRDS))


def status_server_flags(port: int) -> list[str]:
    """The status server on a loopback port, the URL pods report to: the process node's pods run on
    this machine, so they reach it there (kwok's simulated pods run no code and report nothing)."""
    return [f"--status-server-bind-address=127.0.0.1:{port}", f"--status-server-url=https://127.0.0.1:{port}"]


def start(cluster: DevCluster, *, console: Console | None = None, timeout: float = 60) -> int:
    """The CRDs, then the controller for every namespace (unless one runs already); its pid."""
    console = console or Console(stderr=True)
    state = cluster.load_state()
    if state is None or not cluster.is_up():
        raise DevClusterError(f"no dev cluster is running in {cluster.state_dir}; run `kubetrain dev up`")
    with console.status("installing kubetrain's CRDs"):
        install_crds(cluster)
    running = state.pids.get(NAME)
    if running is not None and process.pid_alive(running):
        console.print(f"  the controller is already running (pid {running})")
        return running
    log = cluster.log_path(NAME)
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "kubetrain", "controller", "run"]
    argv += ["--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0"]
    argv += status_server_flags(process.free_port())
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster.adopt(NAME, proc.pid)
    deadline = time.monotonic() + timeout
    with console.status("starting the controller"):
        while STARTED not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                cluster.release(NAME)
                raise DevClusterError(f"the controller did not start; see {log}")
            time.sleep(0.1)
    console.print(f"  [green]✓[/] CRDs installed; controller pid {proc.pid}, log {log}")
    return proc.pid
