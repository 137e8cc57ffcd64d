"""Checkpoints for training code: atomic saves, resume, retention and the termination report.

The training side of kubetrain's checkpoint contract (docs/checkpoints.md). It
needs no Kubernetes and no kubetrain service: the controller passes
``KUBETRAIN_CHECKPOINT_DIR`` and ``KUBETRAIN_RESUME_FROM`` in the environment,
and reads back the JSON report that rank 0 leaves as its container's
termination message.

A checkpoint is a directory ``step-<N>`` holding the state and a ``COMPLETE``
marker. It is written under a temporary name, the marker last, every file
fsync-ed, and only then renamed into place, so a crash at any moment leaves
either a complete checkpoint or none: ``latest()`` never returns a checkpoint
that fails to load. Only rank 0 writes; other ranks' ``save`` is a no-op.

State may be anything ``torch.save`` accepts (model and optimizer state dicts),
or plain ``bytes``; without torch installed, any picklable object.

    ckpt = CheckpointManager(keep=3)
    start = 0
    if (resumed := ckpt.load_latest()) is not None:
        state, start = resumed
        model.load_state_dict(state["model"])
    ckpt.install_report_on_exit()
    for step in range(start, steps):
        ...
        if step % 100 == 0:
            ckpt.save({"model": model.state_dict()}, step, metrics={"loss": loss})
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ENV_DIR = "KUBETRAIN_CHECKPOINT_DIR"
ENV_RESUME_FROM = "KUBETRAIN_RESUME_FROM"
ENV_ATTEMPT = "KUBETRAIN_ATTEMPT"
ENV_TERMINATION_LOG = "KUBETRAIN_TERMINATION_MESSAGE_PATH"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
MARKER = "COMPLETE"
META = "meta.json"
MAX_REPORT_BYTES = 4096  # the kubelet keeps at most this much of a termination message
_NAME = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, Any]:
        metrics: dict[str, Any] = self.meta.get("metrics") or {}
        return metrics


def current_rank() -> int:
    """This process's global rank: torch.distributed's if initialised, else ``$RANK``, else 0."""
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized():
        return int(torch_dist.get_rank())
    return int(os.environ.get("RANK", "0") or 0)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


class CheckpointManager:
    """Save, find and load checkpoints in one directory; report the last one when the process ends."""

    def __init__(
        self, directory: str | Path | None = None, *, keep: int = 3, rank: int | None = None
    ) -> None:
        configured = directory if directory is not None else os.environ.get(ENV_DIR)
        if not configured:
            raise ValueError(f"no checkpoint directory: pass one, or set ${ENV_DIR}")
        if keep < 1:
            raise ValueError(f"keep must be at least 1 (got {keep})")
        self.directory = Path(configured)
        self.keep = keep
        self._rank = rank
        self.last_saved: Checkpoint | None = None
        self.last_metrics: dict[str, Any] = {}
        self.last_step: int | None = None
        self.resumed_from: Checkpoint | None = None
        self._report_installed = False
        self._reported = False

    @property
    def rank(self) -> int:
        return self._rank if self._rank is not None else current_rank()

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    # -- saving ----------------------------------------------------------------------------------
    def save(self, state: Any, step: int, *, metrics: dict[str, Any] | None = None) -> Checkpoint | None:
        """Write ``state`` as checkpoint ``step`` atomically (rank 0 only); apply retention."""
        self.last_step = step
        if metrics:
            self.last_metrics = dict(metrics)
        if not self.is_writer:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"step-{step:08d}"
        tmp = self.directory / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            fmt, payload = self._serialise(state)
            _write(tmp / f"state.{fmt}", payload)
            meta = {
                "step": step,
                "format": fmt,
                "metrics": metrics or {},
                "time": time.time(),
                "attempt": os.environ.get(ENV_ATTEMPT, "1"),
            }
            _write(tmp / META, json.dumps(meta).encode())
            _write(tmp / MARKER, b"")
            _fsync_dir(tmp)
            if final.exists():  # the same step again: move the old one out of the way first
                trash = self.directory / f".trash-{final.name}-{uuid.uuid4().hex[:8]}"
                final.rename(trash)
                tmp.rename(final)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                tmp.rename(final)
            _fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        checkpoint = Checkpoint(final, step, meta)
        self.last_saved = checkpoint
        self._retain()
        return checkpoint

    @staticmethod
    def _serialise(state: Any) -> tuple[str, bytes]:
        if isinstance(state, bytes | bytearray | memoryview):
            return "bin", bytes(state)
        try:
            import io

            import torch
        except ImportError:
            return "pkl", pickle.dumps(state)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return "pt", buffer.getvalue()

    def _retain(self) -> None:
        complete = self.checkpoints()
        for old in complete[: max(0, len(complete) - self.keep)]:
            shutil.rmtree(old.path, ignore_errors=True)
        cutoff = time.time() - 3600
        for stale in self.directory.glob(".tmp-*"):  # left by a crash long ago
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < cutoff:
                    shutil.rmtree(stale, ignore_errors=True)

    # -- finding and loading ---------------------------------------------------------------------
    def checkpoints(self) -> list[Checkpoint]:
        """Every complete checkpoint, oldest first."""
        found = []
        if not self.directory.is_dir():
            return []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match and (entry / MARKER).exists():
                found.append(self._read(entry, int(match[1])))
        return sorted((c for c in found if c is not None), key=lambda c: c.step)

    @staticmethod
    def _read(path: Path, step: int) -> Checkpoint | None:
        try:
            meta = json.loads((path / META).read_text())
        except (OSError, ValueError):
            return None
        return Checkpoint(path, step, meta)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint in the directory."""
        complete = self.checkpoints()
        return complete[-1] if complete else None

    def resume_point(self) -> Checkpoint | None:
        """Where to resume: the newer of ``$KUBETRAIN_RESUME_FROM`` and the latest checkpoint here."""
        candidates = [c for c in (self.latest(), self._from_env()) if c is not None]
        return max(candidates, key=lambda c: c.step) if candidates else None

    def _from_env(self) -> Checkpoint | None:
        hint = os.environ.get(ENV_RESUME_FROM, "")
        if not hint:
            return None
        path = Path(hint)
        match = _NAME.match(path.name)
        if not match or not (path / MARKER).exists():
            return None
        return self._read(path, int(match[1]))

    def load(self, checkpoint: Checkpoint, *, map_location: Any = None) -> Any:
        """The state stored in ``checkpoint``."""
        fmt = checkpoint.meta.get("format", "pt")
        data = (checkpoint.path / f"state.{fmt}").read_bytes()
        if fmt == "bin":
            return data
        if fmt == "pkl":
            return pickle.loads(data)  # our own file, written by save()
        import io

        import torch

        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)

    def load_latest(self, *, map_location: Any = None) -> tuple[Any, int] | None:
        """``(state, step)`` of the resume point, or None when training starts from scratch."""
        checkpoint = self.resume_point()
        if checkpoint is None:
            return None
        self.resumed_from = checkpoint
        self.last_saved = checkpoint
        self.last_step = checkpoint.step
        return self.load(checkpoint, map_location=map_location), checkpoint.step

    # -- the termination report -------------------------------------------------------------------
    def report(self, *, status: str = "completed", metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON report the controller copies into the job (rank 0's termination message)."""
        report: dict[str, Any] = {
            "status": status,
            "step": self.last_step,
            "last_checkpoint": str(self.last_saved.path) if self.last_saved else None,
            "metrics": {**self.last_metrics, **(metrics or {})},
            "attempt": os.environ.get(ENV_ATTEMPT, "1"),
        }
        if self.resumed_from is not None:
            report["resumed_from_step"] = self.resumed_from.step
        return report

    def write_report(
        self, *, status: str = "completed", metrics: dict[str, Any] | None = None
    ) -> Path | None:
        """Write the report as the termination message (rank 0 only); returns where, if anywhere."""
        if not self.is_writer:
            return None
        report = self.report(status=status, metrics=metrics)
        text = json.dumps(report, separators=(",", ":"), default=str)
        while len(text.encode()) > MAX_REPORT_BYTES and report["metrics"]:
            report["metrics"].pop(next(iter(report["metrics"])))
            text = json.dumps(report, separators=(",", ":"), default=str)
        target = Path(os.environ.get(ENV_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG)
        try:
            target.write_text(text)
        except OSError:
            return None
        self._reported = True
        return target

    def install_report_on_exit(self) -> None:
        """Write the report at exit (unless the script wrote its own) and on SIGTERM (then exit 143)."""
        if self._report_installed:
            return
        self._report_installed = True
        atexit.register(lambda: None if self._reported else self.write_report(status="exited"))
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            self.write_report(status="interrupted")
            if callable(previous):
                previous(signum, frame)
            os._exit(128 + signum)

        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            signal.signal(signal.SIGTERM, on_sigterm)
