"""What an Airflow deployment beside the dev cluster records (``state.json``), and how to stop one
from that record alone.

Apart from ``airflow_deploy``, which starts a deployment and so needs the cluster (its kubeconfig,
its state): the cluster's ``down`` stops the deployments started beside it with this module, and
imports nothing that imports the cluster back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.devcluster import paths, process
from kubetrain.devcluster.airflow_config import Layout


@dataclass
class AirflowState:
    """What ``state.json`` records about a running deployment."""

    major: int
    python: str
    ports: dict[str, int]
    secrets: dict[str, str]
    options: dict[str, Any]
    cluster_server: str
    pids: dict[str, int] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)  # Unix time each process was started
    startup_seconds: dict[str, float] = field(default_factory=dict)


def load_state(root: Path) -> AirflowState | None:
    """The state of the deployment in ``root`` (None when it holds none)."""
    return paths.read_state(Layout(root).state_file, AirflowState, "kubetrain dev airflow down")


def tear_down(root: Path) -> bool:
    """Stop every process of the deployment in ``root`` (Airflow's first, Postgres last) and remove
    the directory; returns whether it was there."""
    state = load_state(root)
    return process.tear_down(root, state.pids if state else {}, grace=20)
