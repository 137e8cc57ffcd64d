"""What the deployment tests and benchmarks/airflow_triggerer.py share: a DAG folder with the example
DAGs and the simulated-job DAGs, a recording proxy in front of the cluster, and the readings of it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.faultinjection.faultproxy import Exchange, FaultProxy

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
EXAMPLE_DAGS = ("train_and_evaluate", "deferrable_training", "retry_with_resume", "hyperparameter_sweep")
TEST_DAGS = ("kt_single", "kt_deferred_many")


def dag_folder(dest: Path) -> Path:
    """A DAG folder of links to the repository's example DAGs and these tests' DAGs."""
    dest.mkdir(parents=True, exist_ok=True)
    for source in [*(REPO / "dags").glob("*.py"), *(HERE / "dags").glob("*.py")]:
        (dest / source.name).symlink_to(source)
    return dest


class RecordingProxy:
    """The fault proxy, passing everything through, on an event loop of its own thread."""

    def __init__(self, kubeconfig: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = FaultProxy.for_kubeconfig(kubeconfig)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(30)

    def since(self, started: float) -> list[Exchange]:
        """Requests that began after ``started`` (``time.monotonic()``)."""
        return [e for e in list(self.proxy.exchanges) if e.started >= started]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def watches(exchanges: list[Exchange], plural: str) -> list[Exchange]:
    """The watches of ``plural`` among ``exchanges``."""
    return [
        e for e in exchanges if e.method == "GET" and e.path.endswith(f"/{plural}") and e.query.get("watch")
    ]


def finish_pods(kubectl: Any, namespace: str, jobs: list[str]) -> None:
    """Let the simulated pods of ``jobs``, which hang, succeed now (``kubectl`` as tests/conftest.py's)."""
    for start in range(0, len(jobs), 50):  # a selector of bounded length
        selector = f"training.kubeflow.org/job-name in ({','.join(jobs[start : start + 50])})"
        kubectl(
            "annotate",
            "pods",
            "-n",
            namespace,
            "-l",
            selector,
            "--overwrite",
            "sim.kubetrain.dev/outcome=succeed",
            "sim.kubetrain.dev/run-duration=0s",
        )


def until(probe: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
