"""Where the local cluster keeps its binaries and its state.

Binaries are expensive (a cold build takes many minutes) and are shared by every
clone on the machine, so they live in a cache outside any repository. The state
of a running cluster (keys, kubeconfig, logs, etcd data, pids) lives in one
state dir, so ``down`` removes exactly what ``up`` made. That dir's layout (its
state file: which processes run, their ports; a log per process) and the reading
and writing of its state file are here, for the cluster and for the Airflow
deployment beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from kubetrain.devcluster.errors import DevClusterError

StateT = TypeVar("StateT")

# The checkout kubetrain runs from (installed editable for development): the DAGs, the CRDs, `.venv`.
REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "crds"
CACHE_ENV = "KUBETRAIN_CACHE"
STATE_ENV = "KUBETRAIN_DEV_STATE"


def cache_dir() -> Path:
    """Root of the build cache (``$KUBETRAIN_CACHE`` or ``~/.cache/kubetrain``)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kubetrain"


def bin_dir() -> Path:
    """Directory holding the built control-plane binaries."""
    return cache_dir() / "bin"


def default_state_dir() -> Path:
    """State dir of the default cluster (``$KUBETRAIN_DEV_STATE`` or under the cache)."""
    configured = os.environ.get(STATE_ENV)
    if configured:
        return Path(configured).expanduser()
    return cache_dir() / "dev-cluster"


@dataclass(frozen=True)
class StateLayout:
    """What every state dir holds: its state file and a log per process."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"


def read_state(path: Path, state: Callable[..., StateT], down: str) -> StateT | None:
    """The state recorded in ``path`` (None when there is none); an unreadable file names ``down``, which clears it."""
    if not path.exists():
        return None
    try:
        return state(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise DevClusterError(f"state file {path} is unreadable ({exc}); run `{down}` to clear it") from exc


def write_state(path: Path, state: Any, *, mode: int | None = None) -> None:
    """Record ``state`` (a dataclass) in ``path`` at once: a crash leaves the old file or the new one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)


def still_running(
    existing: StateT | None,
    is_up: Callable[[], bool],
    root: Path,
    name: str,
    command: str,
    *,
    console: Console,
) -> StateT | None:
    """What ``up`` makes of the state it finds in ``root``: ``existing`` when its processes still run
    (saying so), None when there is none; a state whose processes are gone is refused with the fix
    (``command`` is the CLI group that starts and stops ``name``), so nothing starts over a leftover."""
    if existing is None:
        return None
    if is_up():
        console.print(f"[yellow]{name.capitalize()} is already up[/] (state dir {root}).")
        return existing
    raise DevClusterError(
        f"stale state dir {root}: {name} was started there but is no longer running; run `{command} down` "
        f"to clear it, then `{command} up`"
    )
