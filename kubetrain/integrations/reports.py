"""What both trainer callbacks do with a ``CheckpointManager``: report what the trainer saved.

A trainer writes its checkpoints itself, so the callbacks use the manager only for its report: the
termination message the controller reads (``last_checkpoint``, ``step``, ``metrics``), written at the end,
at exit and on an uncaught exception. SIGTERM stays the trainer's: each stops at the end of a step and
saves there, which the manager's own SIGTERM handler (report, then exit at once) would cut short.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from kubetrain import layouts
from kubetrain.checkpoint import ENV_DIR, Checkpoint, CheckpointManager
from kubetrain.locations import is_url


def checkpoint_location(directory: str | os.PathLike[str] | None) -> str:
    """``directory``, else ``$KUBETRAIN_CHECKPOINT_DIR``; a different one than the job's is named on stderr
    (only the job's location survives a new pod)."""
    configured = os.environ.get(ENV_DIR, "")
    location = str(directory) if directory is not None else configured
    if not location:
        raise ValueError(f"no checkpoint location: pass the trainer's output directory, or set ${ENV_DIR}")
    if configured and location.rstrip("/") != configured.rstrip("/"):
        print(
            f"kubetrain: the trainer saves to {location}, not to ${ENV_DIR}={configured}: a new pod "
            "finds its checkpoints only where the job keeps them",
            file=sys.stderr,
        )
    return location


def resume_location(directory: str | os.PathLike[str] | None, layout: str) -> str | None:
    """The newest complete checkpoint of ``layout`` in ``directory`` (or the job's location), or None."""
    found = layouts.detect(checkpoint_location(directory)).newest(layout)
    return found.location if found is not None else None


def report_manager(location: str) -> CheckpointManager:
    """A manager whose report is written at the end, at exit and on an uncaught exception, SIGTERM left
    to the handler that was there (the trainer's, or the default)."""
    manager = CheckpointManager(location)
    previous = signal.getsignal(signal.SIGTERM)
    manager.install_report_on_exit()
    if previous is not None:
        with contextlib.suppress(ValueError):  # not the main thread: nothing was installed either
            signal.signal(signal.SIGTERM, previous)
    return manager


def record_saved(manager: CheckpointManager, location: str, step: int | None) -> None:
    """``location`` (a trainer's checkpoint) is the last one saved: the report names it."""
    manager.last_saved = as_checkpoint(location, step)
    if step is not None:
        manager.last_step = max(step, manager.last_step or 0)


def record_resumed(manager: CheckpointManager, location: str, step: int | None) -> None:
    """Training resumed from ``location``: the report says from which step."""
    manager.resumed_from = manager.last_saved = as_checkpoint(location, step)
    manager.last_step = step


def record_progress(manager: CheckpointManager, step: int, metrics: dict[str, Any] | None = None) -> None:
    manager.last_step = step
    if metrics:
        manager.last_metrics.update(metrics)


def as_checkpoint(location: str, step: int | None) -> Checkpoint:
    return Checkpoint(Path(location), step or 0, url=location if is_url(location) else None)
