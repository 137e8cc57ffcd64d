"""Where the local cluster keeps its binaries and its state.

Binaries are expensive (a cold build takes many minutes) and are shared by every
clone on the machine, so they live in a cache outside any repository. The state
of a running cluster (keys, kubeconfig, logs, etcd data, pids) lives in one
state dir, so ``down`` removes exactly what ``up`` made.
"""

from __future__ import annotations

import os
from pathlib import Path

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
