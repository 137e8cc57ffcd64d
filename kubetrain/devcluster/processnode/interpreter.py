"""Which Python the process node's pods run with.

The process node puts this interpreter's directory first on every container's ``PATH``, so a pod's
``python train.py`` runs it. It used to be whichever interpreter started the cluster: started from the
Airflow environment, as docs/airflow.md says to, every training pod failed with ``No module named
'torch'``. It is a setting of the cluster now (``kubetrain dev up --pod-python``, or
``KUBETRAIN_POD_PYTHON``), and by default the first of these that can import torch and kubetrain (the
training extras): the interpreter running ``dev up``, the ``.venv`` of the working directory, the
``.venv`` of the kubetrain checkout. ``kubetrain dev status`` names the one chosen.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kubetrain.devcluster import paths
from kubetrain.devcluster.errors import DevClusterError

ENV = "KUBETRAIN_POD_PYTHON"
TRAINING_MODULES = ("torch", "kubetrain")  # what `pip install kubetrain[train]` gives a pod


@dataclass(frozen=True)
class Choice:
    """The interpreter pods run with, and what the user should know about it (empty: nothing)."""

    python: str
    warning: str = ""


def has_training_modules(python: str) -> bool:
    """Whether ``python`` runs and can import the training modules (without importing them: fast)."""
    probe = (
        f"import importlib.util as u, sys; sys.exit(0 if all(map(u.find_spec, {TRAINING_MODULES!r})) else 1)"
    )
    try:
        return (
            subprocess.run([python, "-c", probe], capture_output=True, timeout=60, check=False).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


def candidates(workdir: Path) -> list[str]:
    """Where a default is looked for, in order (existing files only, each once)."""
    found = [sys.executable, *(str(d / ".venv" / "bin" / "python") for d in (workdir, paths.REPO))]
    return list(dict.fromkeys(p for p in found if Path(p).is_file()))


def choose(
    given: str | None,
    found: Iterable[str],
    usable: Callable[[str], bool] = has_training_modules,
) -> Choice:
    """The interpreter ``given`` (``--pod-python``, else ``$KUBETRAIN_POD_PYTHON``), else the first of
    ``found`` that is ``usable``, else the first of ``found`` with a warning that says how to fix it."""
    missing = ", ".join(TRAINING_MODULES)
    if given:
        if not Path(given).is_file() or not os.access(given, os.X_OK):
            raise DevClusterError(f"--pod-python {given}: no such executable; name a Python interpreter")
        if usable(given):
            return Choice(given)
        return Choice(given, f"pods run with {given}, which cannot import {missing}: training pods will fail")
    order = list(found)
    for python in order:
        if usable(python):
            return Choice(python)
    return Choice(
        order[0] if order else sys.executable,
        f"no Python with {missing} found ({', '.join(order) or 'none'}): training pods will fail; "
        "run `make venv` or pass --pod-python (an interpreter with `pip install kubetrain[train]`)",
    )
