"""Checkpoints for training code: atomic saves, resume, retention, fencing and the termination report.

The training side of kubetrain's checkpoint contract (docs/checkpoints.md). It
needs no Kubernetes and no kubetrain service: the controller passes
``KUBETRAIN_CHECKPOINT_DIR``, ``KUBETRAIN_RESUME_FROM``, ``KUBETRAIN_ATTEMPT`` and
``KUBETRAIN_LINEAGE`` in the environment, and reads back the JSON report that
rank 0 leaves as its container's termination message.

A checkpoint is a directory ``step-<N>`` holding the state and a ``COMPLETE``
marker. It is written under a temporary name, the marker last, every file
fsync-ed, and only then renamed into place, so a crash at any moment leaves
either a complete checkpoint or none: ``latest()`` never returns a checkpoint
that fails to load. Only rank 0 writes; other ranks' ``save`` is a no-op, except for a sharded
save, where every rank writes its shards and rank 0 commits (``kubetrain.checkpoint_sharded``). With
``blocking=False`` the write and the commit run in a background thread (``kubetrain.checkpoint_async``).

Saving a step that exists already cannot be one rename (a directory is never
renamed over a non-empty one), so the old one is first moved aside to
``.trash-step-<N>-*`` and the new one renamed into place. A displaced copy
still counts for its step while ``step-<N>`` is missing, so a crash between
the two renames leaves the old checkpoint found, and after the second the
new one. Deleting starts with the marker, so a half-deleted checkpoint is
never taken for a complete one.

Fencing: every attempt of a job lineage (a retry, a resubmission) uses the
same directory, and a pod of an older attempt can outlive its job (a
partitioned node). With ``KUBETRAIN_ATTEMPT`` set, rank 0 records its attempt
in ``.fence/attempt-<N>@<lineage>`` (``.fence/attempt-<N>`` without
``KUBETRAIN_LINEAGE``) the first time it touches the directory (or at
``start()``); the fence of a lineage is the highest attempt it recorded there.
A file per attempt rather than one file holding a number, because a directory
has no compare-and-swap: two processes each replacing one file can leave the
lower number last, while the maximum of a set of names that only grows can
only rise. An attempt below the fence is refused when it starts, before a save
writes anything, and again right before it publishes: ``FencedOff``, a
``SystemExit`` with code ``EXIT_FENCED``, so an uncaught one ends the process
with that code and a broad ``except Exception`` does not swallow it.

Lineages: one directory can also pass from one lineage to the next (a pipeline
step continuing another's checkpoints). Attempt numbers of two lineages say
nothing about each other, so an attempt is only fenced by its own lineage's,
and each checkpoint records its lineage beside its attempt. A process orders
its own lineage's checkpoints by (attempt, step), above every other lineage's,
and those by step alone: a continuation that has not saved yet resumes from
where the previous lineage got to. A checkpoint of a newer attempt of the
same lineage is never moved aside, overwritten or deleted by an older one;
retention and the clean-up of leftovers only touch the process's own lineage
(another lineage's checkpoints may be what a continuation was told to resume
from). A process without a lineage counts the unlabelled checkpoints as its
own, and its fence is the highest attempt of any lineage: it may be the first
attempt of a lineage that its resubmission named, so it is fenced off by that.

State may be anything ``torch.save`` accepts (model and optimizer state dicts),
or plain ``bytes``; without torch installed, any picklable object.

Trust: ``KUBETRAIN_RESUME_FROM`` comes from the job's ``kubetrain.dev/last-checkpoint``
annotation, which anyone who may patch the job can set, so it is followed only to a
``step-<N>`` directly inside this directory (symbolic links resolved). Loading reads the
state with ``torch.load(weights_only=True)`` (tensors, numbers, strings and containers
only) and falls back to full unpickling, which can run code, only for a state that needs
it: loading trusts whoever can write the checkpoint directory, never anyone else.

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
import errno
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from kubetrain.locations import is_url

if TYPE_CHECKING:
    from kubetrain.checkpoint_async import BackgroundSave

ENV_DIR = "KUBETRAIN_CHECKPOINT_DIR"
ENV_RESUME_FROM = "KUBETRAIN_RESUME_FROM"
ENV_ATTEMPT = "KUBETRAIN_ATTEMPT"
ENV_LINEAGE = "KUBETRAIN_LINEAGE"
ENV_TERMINATION_LOG = "KUBETRAIN_TERMINATION_MESSAGE_PATH"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
MARKER = "COMPLETE"
META = "meta.json"
FENCE_DIR = ".fence"
EXIT_FENCED = 86  # 1-127: a restart policy of ExitCode treats it as permanent, as it is
EXIT_TERMINATED = 128 + int(
    signal.SIGTERM
)  # stopped for a disruption: retryable under ExitCode, as SIGTERM is
MAX_REPORT_BYTES = 4096  # the kubelet keeps at most this much of a termination message
STALE_SECONDS = 3600  # a temporary directory of this attempt untouched this long belongs to a dead save
PUBLISH_TRIES = 5
_NAME = re.compile(r"^step-(\d+)$")
_TRASH = re.compile(r"^\.trash-step-(\d+)-")
_TMP = re.compile(r"^\.tmp-step-(\d+)-(?:a(\d+)-([0-9a-f]+)-)?")
_TMP_LINEAGE = re.compile(r"@([A-Za-z0-9._-]+)$")
_FENCE_MARK = re.compile(r"^attempt-(\d+)(?:@([A-Za-z0-9._-]+))?$")
# a Kubernetes label value (the lineage is the kubetrain.dev/lineage label): safe as part of a file name
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_OUR_FILES = {MARKER, META, "state.pt", "state.bin", "state.pkl"}
_DCP_FILE = re.compile(r"^(__\d+_\d+\.distcp|\.metadata)$")  # a sharded save's (torch.distributed.checkpoint)


class FencedOff(SystemExit):
    """An attempt older than the fence tried to use the checkpoint directory: it must stop.

    A ``SystemExit`` with code ``EXIT_FENCED``: uncaught, the process exits with that code (the
    message has gone to stderr already); ``except Exception`` does not catch it, on purpose.
    """

    def __init__(
        self, attempt: int, fence: int, directory: Path | str, refused: str = "", lineage: str | None = None
    ) -> None:
        super().__init__(EXIT_FENCED)
        self.attempt = attempt
        self.fence = fence
        self.directory = directory
        self.refused = refused  # what was refused, e.g. "save step 40"
        self.lineage = lineage  # the fenced process's (None: it was compared with every lineage)

    def __str__(self) -> str:
        refused = f" (refused to {self.refused})" if self.refused else ""
        of = "" if self.lineage is None else f" of lineage {self.lineage}"
        marks = f"{self.directory}/{FENCE_DIR}/{'' if self.lineage is None else f'attempt-*@{self.lineage}'}"
        return (
            f"kubetrain.checkpoint: attempt {self.attempt}{of} is fenced off from {self.directory}: "
            f"attempt {self.fence}{of} has started using it, so attempt {self.attempt} must not write there"
            f"{refused}; exiting with code {EXIT_FENCED}. If no attempt {self.fence}{of} exists, this job "
            f"reuses another job's directory: give it a kubetrain.dev/lineage label of its own, or attempt "
            f"{self.fence + 1} or more (kubetrain.dev/attempt), or remove {marks} to hand the directory over."
        )


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: a directory on disk, or (with ``url``) a committed one in object storage,
    whose ``path`` is then its key in the store."""

    path: Path
    step: int
    meta: dict[str, Any] = field(default_factory=dict)
    url: str | None = None

    @property
    def location(self) -> str:
        """Where it is, as the report and ``$KUBETRAIN_RESUME_FROM`` name it."""
        return self.url or str(self.path)

    @property
    def metrics(self) -> dict[str, Any]:
        metrics: dict[str, Any] = self.meta.get("metrics") or {}
        return metrics

    @property
    def attempt(self) -> int:
        """The attempt that saved it (1 for checkpoints saved without ``KUBETRAIN_ATTEMPT``)."""
        return _as_attempt(self.meta.get("attempt")) or 1

    @property
    def lineage(self) -> str | None:
        """The lineage that saved it (None for checkpoints saved without ``KUBETRAIN_LINEAGE``)."""
        return _as_lineage(self.meta.get("lineage"))


@dataclass(frozen=True)
class Entry:
    """What one name in a checkpoint directory is: a checkpoint, a displaced copy, or a save under way."""

    path: Path
    kind: str  # "step" (published), "trash" (moved aside by an overwrite) or "tmp" (being written)
    step: int
    complete: bool = False
    meta: dict[str, Any] | None = None
    attempt: int | None = None  # step/trash: from the meta; tmp: from the name
    lineage: str | None = None  # step/trash: from the meta; tmp: from the name
    token: str | None = None  # tmp: the writing manager's
    age: float = 0.0  # seconds since it last changed
    foreign: bool = False  # step: holds files save() never writes (not ours to delete)


# -- pure decisions ------------------------------------------------------------------------------
def parse_attempt(value: str | None) -> int | None:
    """``$KUBETRAIN_ATTEMPT`` as a number; None when unset or empty (no fencing)."""
    if value is None or not value.strip():
        return None
    attempt = _as_attempt(value)
    if attempt is None:
        raise ValueError(f"${ENV_ATTEMPT} must be a positive integer (got {value!r})")
    return attempt


def _as_attempt(value: Any) -> int | None:
    try:
        attempt = int(str(value).strip())
    except ValueError:
        return None
    return attempt if attempt >= 1 else None


def parse_lineage(value: str | None) -> str | None:
    """``$KUBETRAIN_LINEAGE`` checked; None when unset or empty (the unlabelled lineage)."""
    if value is None or not value.strip():
        return None
    lineage = _as_lineage(value.strip())
    if lineage is None:
        raise ValueError(
            f"${ENV_LINEAGE} must be a Kubernetes label value: up to 63 letters, digits, '-', '_' or '.', "
            f"starting and ending with a letter or digit (got {value!r})"
        )
    return lineage


def _as_lineage(value: Any) -> str | None:
    return value if isinstance(value, str) and _LABEL_VALUE.match(value) else None


def fence_mark(attempt: int, lineage: str | None) -> str:
    """The name an attempt records itself under in ``.fence``."""
    return f"attempt-{attempt}" if lineage is None else f"attempt-{attempt}@{lineage}"


def fence_of(names: Iterable[str], lineage: str | None = None) -> int | None:
    """The fence for a process of ``lineage``, given the names in ``.fence``: None when none is recorded.

    The highest attempt that lineage recorded; without a lineage, the highest of any lineage (the
    process may be the first attempt of a lineage that only its resubmission named).
    """
    attempts = [
        int(m[1]) for m in map(_FENCE_MARK.match, names) if m and (lineage is None or m[2] == lineage)
    ]
    return max(attempts, default=None)


def order_key(checkpoint: Checkpoint, lineage: str | None = None) -> tuple[int, int, int]:
    """Where ``checkpoint`` stands for a process of ``lineage``: the order ``latest()`` (the last)
    and retention (the first go) use.

    The process's own lineage's checkpoints by (attempt, step), after every other lineage's,
    which go by step alone (their attempt numbers are not comparable with its own).
    """
    if checkpoint.lineage == lineage:
        return 1, checkpoint.attempt, checkpoint.step
    return 0, 0, checkpoint.step


def choose(entries: Iterable[Entry], lineage: str | None = None) -> list[Checkpoint]:
    """One checkpoint per step, oldest first in the order of a process of ``lineage`` (``order_key``).

    A complete ``step-<N>`` stands for its step; without one, the newest complete copy an
    overwrite moved aside does (a crash between the two renames of an overwrite left it there).
    """
    published: dict[int, Checkpoint] = {}
    displaced: dict[int, Checkpoint] = {}
    for entry in entries:
        if not entry.complete or entry.meta is None or entry.kind == "tmp":
            continue
        checkpoint = Checkpoint(entry.path, entry.step, entry.meta)
        if entry.kind == "step":
            published[entry.step] = checkpoint
            continue
        best = displaced.get(entry.step)
        if best is None or _recency(checkpoint, lineage) > _recency(best, lineage):
            displaced[entry.step] = checkpoint
    chosen = {**displaced, **published}
    return sorted(chosen.values(), key=lambda checkpoint: order_key(checkpoint, lineage))


def _recency(checkpoint: Checkpoint, lineage: str | None) -> tuple[int, int, float]:
    saved = checkpoint.meta.get("time")
    own = checkpoint.lineage == lineage
    return own, checkpoint.attempt if own else 0, float(saved) if isinstance(saved, int | float) else 0.0


@dataclass(frozen=True)
class CleanupPlan:
    """What a writer may delete, and which displaced copies go back to their step's name."""

    discard: list[Path]
    restore: list[tuple[Path, Path]]


def plan_cleanup(
    entries: list[Entry],
    *,
    keep: int,
    attempt: int,
    fencing: bool,
    own_token: str,
    protect: Path | None = None,
    lineage: str | None = None,
) -> CleanupPlan:
    """Retention, and the leftovers of saves that crashed, for a writer of ``attempt`` of ``lineage``.

    Keeps the last ``keep`` checkpoints of the writer's lineage and never deletes another
    lineage's (a continuation may have been told to resume from one), nor a checkpoint of a
    newer attempt, nor ``protect`` (the one just saved), nor a temporary directory that a live
    save of this or a newer attempt, or of another lineage, may be writing (an older attempt's of
    the same lineage is fair game when fencing: it can no longer be published). A displaced copy
    of the writer's lineage that still stands for its step (a crash between the two renames of
    an overwrite) is renamed back.
    """
    chosen = choose(entries, lineage)
    own = [c for c in chosen if c.lineage == lineage]
    kept = own[-keep:]
    discard = [c.path for c in own[:-keep] if c.attempt <= attempt and c.path != protect]
    restore = [(c.path, c.path.with_name(f"step-{c.step:08d}")) for c in kept if c.path.name.startswith(".")]
    chosen_paths = {c.path for c in chosen}
    oldest_kept = min((c.step for c in kept), default=None)
    for entry in entries:
        ours = entry.lineage == lineage
        if entry.kind == "trash":
            # superseded by a published step-N, a duplicate, or half deleted: not a checkpoint
            half_deleted = entry.meta is None  # of no lineage one can tell
            if entry.path not in chosen_paths and (
                half_deleted or (ours and (entry.attempt or 1) <= attempt)
            ):
                discard.append(entry.path)
        elif entry.kind == "tmp":
            mine = entry.token == own_token  # a save of this manager that failed to clean up
            fenced_off = fencing and ours and entry.attempt is not None and entry.attempt < attempt
            stale = ours and (entry.attempt is None or entry.attempt <= attempt) and entry.age > STALE_SECONDS
            if mine or fenced_off or stale:
                discard.append(entry.path)
        elif entry.complete or entry.foreign or oldest_kept is None or not (ours or entry.meta is None):
            continue
        elif entry.step < oldest_kept:
            discard.append(entry.path)  # a deletion that crashed half way
    return CleanupPlan(discard, restore)


def current_rank() -> int:
    """This process's global rank: torch.distributed's if initialised, else ``$RANK``, else 0."""
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized():
        return int(torch_dist.get_rank())
    return int(os.environ.get("RANK", "0") or 0)


# -- file-system steps (separate functions, so tests can stop a save between any two) ------------
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


def _rename(source: Path, target: Path) -> None:
    os.rename(source, target)


def _unlink(path: Path) -> None:
    os.unlink(path)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _discard(path: Path) -> None:
    """Delete a checkpoint-like directory, its marker first: half deleted, it is no longer complete."""
    with contextlib.suppress(OSError):
        _unlink(path / MARKER)
        _fsync_dir(path)
    _rmtree(path)


def read_fence(directory: str | Path, lineage: str | None = None) -> int | None:
    """The highest attempt of ``lineage`` that has started using ``directory`` (of any lineage,
    for None); None when none has recorded itself."""
    try:
        return fence_of(os.listdir(Path(directory) / FENCE_DIR), lineage)
    except (FileNotFoundError, NotADirectoryError):
        return None


def deserialise(fmt: str, data: bytes, *, map_location: Any = None, weights_only: bool = False) -> Any:
    """A state as ``save`` wrote it (``fmt``: its meta's format): plain data first, full unpickling
    only for a state that needs it, unless ``weights_only`` refuses that (the module's Trust)."""
    if fmt == "bin":
        return data
    if fmt == "pkl":
        try:
            return _PlainUnpickler(io.BytesIO(data)).load()
        except pickle.UnpicklingError:
            if weights_only:
                raise
            return pickle.loads(data)  # written by save(), in the job's own checkpoint location
    import torch

    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        if weights_only:
            raise
    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only (numbers, strings, bytes, lists, tuples, dicts, sets), the
    counterpart of ``torch.load(weights_only=True)`` for states saved without torch: a pickle
    that names any class or function is refused, so it cannot run code."""

    PLAIN: ClassVar[frozenset[tuple[str, str]]] = frozenset(
        ("builtins", name) for name in ("set", "frozenset", "complex", "bytearray", "slice", "range")
    ) | {("collections", "OrderedDict")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.PLAIN:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _digest(name: str, chunks: Iterable[bytes]) -> dict[str, Any]:
    """A manifest's entry for a file: its name, size and SHA-256, from its bytes in chunks."""
    sha = hashlib.sha256()
    size = 0
    for chunk in chunks:
        sha.update(chunk)
        size += len(chunk)
    return {"name": name, "size": size, "sha256": sha.hexdigest()}


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / META).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _only_ours(path: Path) -> bool:
    try:
        return all(name in _OUR_FILES or _DCP_FILE.match(name) for name in os.listdir(path))
    except OSError:
        return False


def scan(directory: Path) -> list[Entry]:
    """Every checkpoint, displaced copy and save under way in ``directory``."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    now = time.time()
    found = []
    for name in names:
        path = directory / name
        if match := _NAME.match(name) or _TRASH.match(name):
            kind = "step" if name.startswith("step-") else "trash"
            meta = _read_meta(path)
            complete = meta is not None and (path / MARKER).exists()
            attempt = (_as_attempt(meta.get("attempt")) or 1) if meta is not None else None
            lineage = _as_lineage(meta.get("lineage")) if meta is not None else None
            foreign = not complete and kind == "step" and not _only_ours(path)
            found.append(Entry(path, kind, int(match[1]), complete, meta, attempt, lineage, foreign=foreign))
        elif match := _TMP.match(name):
            try:
                age = now - path.stat().st_mtime
            except OSError:
                continue
            attempt = int(match[2]) if match[2] and int(match[2]) > 0 else None
            lineage = named[1] if (named := _TMP_LINEAGE.search(name)) else None
            found.append(
                Entry(path, "tmp", int(match[1]), attempt=attempt, lineage=lineage, token=match[3], age=age)
            )
    return found


def configured_location(directory: str | Path | None) -> str:
    """The checkpoint location a manager is for: ``directory``, else ``$KUBETRAIN_CHECKPOINT_DIR``
    (empty when neither is given)."""
    return str(directory if directory is not None else os.environ.get(ENV_DIR) or "")


class CheckpointManager:
    """Save, find and load checkpoints in one directory; report the last one when the process ends.

    Given an object-store URL (``s3://bucket/prefix``; ``$KUBETRAIN_CHECKPOINT_DIR`` may be one), it
    is a ``kubetrain.checkpoint_objects.ObjectStoreCheckpointManager``: the same methods over a commit
    protocol that needs no rename."""

    def __new__(cls, directory: str | Path | None = None, *args: Any, **kwargs: Any) -> CheckpointManager:
        if cls is CheckpointManager and is_url(configured_location(directory)):
            from kubetrain.checkpoint_objects import ObjectStoreCheckpointManager  # it builds on this module

            return super().__new__(ObjectStoreCheckpointManager)
        return super().__new__(cls)

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        keep: int = 3,
        rank: int | None = None,
        attempt: int | None = None,
        lineage: str | None = None,
    ) -> None:
        configured = configured_location(directory)
        if not configured:
            raise ValueError(f"no checkpoint directory: pass one, or set ${ENV_DIR}")
        if keep < 1:
            raise ValueError(f"keep must be at least 1 (got {keep})")
        if attempt is not None and attempt < 1:
            raise ValueError(f"attempt must be at least 1 (got {attempt})")
        self.directory = Path(configured)
        self.keep = keep
        self._rank = rank
        # None: plain local use, no fence (it then counts as attempt 1, like a first attempt)
        self.attempt = attempt if attempt is not None else parse_attempt(os.environ.get(ENV_ATTEMPT))
        # None: the unlabelled lineage (its fence is every lineage's, see fence_of)
        self.lineage = parse_lineage(lineage if lineage is not None else os.environ.get(ENV_LINEAGE))
        self.last_saved: Checkpoint | None = None
        self.last_metrics: dict[str, Any] = {}
        self.last_step: int | None = None
        self.resumed_from: Checkpoint | None = None
        self.fenced_by: int | None = None
        self._token = uuid.uuid4().hex[:8]
        self._started = False
        self._report_installed = False
        self._reported = False
        self._final_state: Callable[[], Any] | None = None
        self._termination_wait = 20.0
        self.termination_requested = False  # SIGTERM arrived after save_on_termination
        self.error: tuple[str, str] | None = None  # the uncaught exception: (Type: message, traceback tail)
        self._in_flight: BackgroundSave | None = None  # the save(blocking=False) being written
        self._surfacing_at_exit = False
        self._checkpoint_group: Any = None  # the process group of background sharded saves

    @property
    def location(self) -> str:
        """Where the checkpoints are: the directory, or the object-store URL."""
        return str(self.directory)

    @property
    def rank(self) -> int:
        return self._rank if self._rank is not None else current_rank()

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def _fencing(self) -> bool:
        return self.attempt is not None and self.is_writer

    @property
    def _ordinal(self) -> int:
        """The attempt this process counts as: its own, or 1 without ``$KUBETRAIN_ATTEMPT``."""
        return self.attempt or 1

    # -- the fence -------------------------------------------------------------------------------
    def start(self) -> None:
        """Record this attempt in its lineage's fence (rank 0, with ``$KUBETRAIN_ATTEMPT``).

        Called by the first method that touches the directory; call it earlier to fence older
        attempts off sooner. Raises ``FencedOff`` when a newer attempt has started already.
        """
        if self._started or not self._fencing:
            return
        assert self.attempt is not None
        fence_dir = self.directory / FENCE_DIR
        if not fence_dir.is_dir():
            fence_dir.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self.directory)
        mark = fence_dir / fence_mark(self.attempt, self.lineage)
        if not mark.exists():
            record = {
                "attempt": self.attempt,
                "lineage": self.lineage,
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
            tmp = fence_dir / f".tmp-{mark.name}-{self._token}"
            _write(tmp, json.dumps({**record, "time": time.time()}).encode())
            _rename(tmp, mark)
            _fsync_dir(fence_dir)
        self._started = True
        self._check_fence("start")  # re-read: a newer attempt may have recorded itself meanwhile

    def fence(self) -> int | None:
        """The highest attempt of this lineage that has started using the directory (of any lineage,
        without one; None: no attempt recorded)."""
        return read_fence(self.directory, self.lineage)

    def check_fence(self) -> None:
        """Raise ``FencedOff`` if a newer attempt of this lineage has started; call before writing files
        of your own."""
        self._check_fence("")

    def _check_fence(self, refused: str) -> None:
        if not self._fencing:
            return
        assert self.attempt is not None
        fence = self.fence()
        if fence is not None and fence > self.attempt:
            self._fenced_off(fence, refused)

    def _fenced_off(self, fence: int, refused: str) -> None:
        assert self.attempt is not None
        error = FencedOff(self.attempt, fence, self.location, refused, self.lineage)
        if self.fenced_by is None:
            print(error, file=sys.stderr, flush=True)
        self.fenced_by = fence
        if self._report_installed:
            self.write_report(status="fenced")
        raise error

    # -- saving ----------------------------------------------------------------------------------
    def save(
        self,
        state: Any,
        step: int,
        *,
        metrics: dict[str, Any] | None = None,
        sharded: bool | None = None,
        blocking: bool = True,
    ) -> Checkpoint | None:
        """Write ``state`` as checkpoint ``step`` atomically (rank 0 only); apply retention.

        ``sharded``: every rank writes its own shards with ``torch.distributed.checkpoint`` and rank 0
        commits them once all have written (call ``save`` on every rank then); left out, a save is
        sharded when ``torch.distributed`` is initialised and the state holds DTensor or ShardedTensor
        values (``kubetrain.checkpoint_sharded``).

        ``blocking=False``: return once the state is copied into host memory, and write and commit it
        in a background thread (``kubetrain.checkpoint_async``); ``wait()`` gives the checkpoint. Every
        save first waits for the one in flight and raises what that one raised.

        Raises ``FencedOff`` (exit code 86 when uncaught) when a newer attempt of this lineage uses the
        directory.
        """
        self.wait()  # at most one save in flight, and never an error of one lost
        if self._sharded(state, sharded):
            from kubetrain.checkpoint_sharded import save_sharded

            return save_sharded(self, state, step, metrics, blocking=blocking)
        if not self._begin_save(step, metrics):
            return None
        fmt, payload = self._serialise(state)  # the staging copy: the caller may change the state after
        if blocking:
            return self._save_payload(step, fmt, payload, metrics)
        self._in_background(step, lambda: self._save_payload(step, fmt, payload, metrics))
        return None

    def _in_background(self, step: int, work: Callable[[], Checkpoint | None]) -> None:
        """Run ``work`` (the write and the commit of ``step``) as the save in flight."""
        from kubetrain.checkpoint_async import BackgroundSave

        if not self._surfacing_at_exit:
            self._surfacing_at_exit = True
            atexit.register(self._surface_at_exit)
        self._in_flight = BackgroundSave(step, work)

    def wait(self) -> Checkpoint | None:
        """Wait for the save in flight (``save(..., blocking=False)``) to be committed: its checkpoint
        (None when no save is in flight, or on a rank that does not write). Raises what that save
        raised (``FencedOff`` included), once."""
        pending, self._in_flight = self._in_flight, None
        return None if pending is None else pending.wait()

    def _let_in_flight_finish(self, timeout: float) -> None:
        """Give the save in flight up to ``timeout`` seconds to commit (its errors are left for later)."""
        if self._in_flight is not None:
            with contextlib.suppress(Exception):
                self._in_flight.wait(timeout)

    def _surface_at_exit(self) -> None:
        """At exit: let the save in flight finish; what it raised goes to stderr and into the report.
        Then release the background saves' process group (``_release_background_group``)."""
        try:
            self.wait()
        except BaseException as error:
            message = traceback.format_exception_only(type(error), error)[-1].strip()[:512]
            print(f"kubetrain.checkpoint: the background save failed: {message}", file=sys.stderr, flush=True)
            if self.error is None:
                self.error = (message, "".join(traceback.format_exception(error))[-2048:])
        finally:
            self._release_background_group()

    def _release_background_group(self) -> None:
        """Destroy the process group this manager made for background saves, while the interpreter is
        still whole. Why: this method runs from ``atexit``, which holds the manager, so the group would
        otherwise outlive ``destroy_process_group()`` and be freed during interpreter finalisation, where
        gloo's worker threads, releasing the tensors of its last collectives, need a GIL that no longer
        exists: the process then aborts ("terminate called without an active exception", exit -6) after
        a successful run."""
        group, self._checkpoint_group = self._checkpoint_group, None
        if group is None:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            with contextlib.suppress(ValueError, RuntimeError):  # already destroyed with every group
                dist.destroy_process_group(group)

    def _background_group(self) -> Any:
        """The process group a background sharded save's collectives use (made on first use, by every
        rank at the same save): gloo, apart from the default group the training loop uses. None
        without a process group."""
        import torch.distributed as dist

        if self._checkpoint_group is None and dist.is_available() and dist.is_initialized():
            self._checkpoint_group = dist.new_group(backend="gloo")
        return self._checkpoint_group

    def _save_payload(
        self, step: int, fmt: str, payload: bytes, metrics: dict[str, Any] | None
    ) -> Checkpoint:
        """Write the serialised state into a temporary directory and publish it (``_publish_dir``)."""
        tmp = self._new_tmp_dir(step)
        try:
            _write(tmp / f"state.{fmt}", payload)
        except BaseException:
            with contextlib.suppress(OSError):
                _discard(tmp)
            self._check_fence(f"save step {step}")  # a newer attempt's cleanup may be what broke this save
            raise
        return self._publish_dir(tmp, step, self._meta(step, fmt, metrics))

    def _publish_dir(self, tmp: Path, step: int, meta: dict[str, Any]) -> Checkpoint:
        """Complete the checkpoint written into ``tmp`` (its meta, then the marker) and rename it to
        ``step-<N>``, the fence checked right before; apply retention."""
        refusal = f"save step {step}"
        final = self.directory / f"step-{step:08d}"
        try:
            _write(tmp / META, json.dumps(meta).encode())
            _write(tmp / MARKER, b"")
            _fsync_dir(tmp)
            self._check_fence(refusal)
            displaced = self._publish(tmp, final, step)
        except FencedOff:
            with contextlib.suppress(OSError):
                _discard(tmp)
            raise
        except BaseException:
            with contextlib.suppress(OSError):
                _discard(tmp)
            self._check_fence(refusal)  # a newer attempt's cleanup may be what broke this save
            raise
        checkpoint = Checkpoint(final, step, meta)
        self.last_saved = checkpoint
        self._check_fence(refusal)  # published just as a newer attempt started: stop here
        for old in displaced:
            _discard(old)
        self._clean_up(protect=final)
        return checkpoint

    def _sharded(self, state: Any, requested: bool | None) -> bool:
        """Whether a save of ``state`` is sharded (``kubetrain.checkpoint_sharded.is_sharded_save``)."""
        if requested is False:
            return False
        from kubetrain.checkpoint_sharded import is_sharded_save

        torch_dist = sys.modules.get("torch.distributed")
        distributed = torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized()
        return is_sharded_save(requested, state, bool(distributed))

    # -- where a sharded save's ranks write (kubetrain.checkpoint_sharded drives them) -----------
    def _shards_prepare(self, step: int) -> str:
        """Rank 0: make the temporary directory all ranks write the step's shards into."""
        return str(self._new_tmp_dir(step))

    def _new_tmp_dir(self, step: int) -> Path:
        """A new directory, named for this save's writer, that a checkpoint of ``step`` is written into
        before it is published (``_publish_dir``)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".tmp-step-{step:08d}-{self._writer()}"
        tmp.mkdir()
        return tmp

    def _shards_storage(self, place: str, *, write: bool) -> Any:
        """DCP's storage writer (or reader) for ``place``."""
        from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter

        return FileSystemWriter(place) if write else FileSystemReader(place)

    def _shards_digest(self, place: str, name: str) -> dict[str, Any]:
        """A written file's manifest entry: its name, size and SHA-256."""
        with (Path(place) / name).open("rb") as handle:
            return _digest(name, iter(lambda: handle.read(1 << 20), b""))

    def _shards_sizes(self, place: str) -> dict[str, int]:
        """The files rank 0 sees in ``place``, with their sizes."""
        return {entry.name: entry.stat().st_size for entry in os.scandir(place) if entry.is_file()}

    def _shards_commit(self, step: int, place: str, manifest: dict[str, Any]) -> Checkpoint:
        """Rank 0, once every rank has written: publish ``place`` as checkpoint ``step``."""
        return self._publish_dir(Path(place), step, manifest)

    def _shards_discard(self, place: str) -> None:
        with contextlib.suppress(OSError):
            _discard(Path(place))

    def _shards_place(self, checkpoint: Checkpoint) -> str:
        """Where a sharded checkpoint's files are."""
        return str(checkpoint.path)

    def _begin_save(self, step: int, metrics: dict[str, Any] | None) -> bool:
        """Record the step and its metrics for the report; for the writer (rank 0), start and check the
        fence. Whether this process writes the checkpoint."""
        self.last_step = step
        if metrics:
            self.last_metrics = dict(metrics)
        if not self.is_writer:
            return False
        self.start()
        self._check_fence(f"save step {step}")
        return True

    def _meta(self, step: int, fmt: str, metrics: dict[str, Any] | None) -> dict[str, Any]:
        """What a checkpoint records of itself (its meta, or the object-store commit's manifest)."""
        meta: dict[str, Any] = {
            "step": step,
            "format": fmt,
            "metrics": metrics or {},
            "time": time.time(),
            "attempt": self._ordinal,
        }
        if self.lineage is not None:
            meta["lineage"] = self.lineage
        return meta

    def _writer(self) -> str:
        """A name no other save uses, that says whose it is: cleanup tells an older attempt's dead save
        from a live one, and leaves another lineage's alone."""
        name = f"a{self.attempt or 0}-{self._token}-{uuid.uuid4().hex[:8]}"
        return name if self.lineage is None else f"{name}@{self.lineage}"

    def _publish(self, tmp: Path, final: Path, step: int) -> list[Path]:
        """Rename ``tmp`` to ``final``; an existing ``final`` is moved aside first (returned).

        Whatever is moved aside is inspected after the move, so a checkpoint that a newer attempt of
        this lineage published in the meantime is put back, never replaced. (Another lineage's
        checkpoint of the same step is replaced: there is one checkpoint per step.)
        """
        displaced: list[Path] = []
        for _ in range(PUBLISH_TRIES):
            try:
                _rename(tmp, final)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            else:
                _fsync_dir(self.directory)
                return displaced
            aside = self.directory / f".trash-{final.name}-{uuid.uuid4().hex[:8]}"
            try:
                _rename(final, aside)
            except FileNotFoundError:
                continue  # gone already: try the rename again
            _fsync_dir(self.directory)
            displaced.append(aside)
            if not self._fencing:
                continue
            held = _read_meta(aside) or {}
            holder = _as_attempt(held.get("attempt"))
            fences_us = self.lineage is None or _as_lineage(held.get("lineage")) == self.lineage
            refusal = f"save step {step}"
            try:
                if holder is not None and self.attempt is not None and holder > self.attempt and fences_us:
                    self._fenced_off(max(holder, self.fence() or holder), refusal)
                self._check_fence(refusal)
            except FencedOff:
                with contextlib.suppress(OSError):
                    _rename(aside, final)  # put it back (unless something else is there now)
                raise
        raise OSError(f"could not publish {final}: something else keeps writing that step")

    @staticmethod
    def _serialise(state: Any) -> tuple[str, bytes]:
        if isinstance(state, bytes | bytearray | memoryview):
            return "bin", bytes(state)
        try:
            import torch
        except ImportError:
            return "pkl", pickle.dumps(state)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return "pt", buffer.getvalue()

    def _clean_up(self, *, protect: Path | None = None) -> None:
        """Retention, and the leftovers of saves that crashed (see ``plan_cleanup``)."""
        plan = plan_cleanup(
            scan(self.directory),
            keep=self.keep,
            attempt=self._ordinal,
            fencing=self._fencing,
            own_token=self._token,
            protect=protect,
            lineage=self.lineage,
        )
        for path in plan.discard:
            _discard(path)
        for displaced, name in plan.restore:
            with contextlib.suppress(OSError):  # taken meanwhile: then this copy is superseded
                _rename(displaced, name)

    # -- finding and loading ---------------------------------------------------------------------
    def checkpoints(self) -> list[Checkpoint]:
        """Every complete checkpoint, one per step, oldest first: other lineages' by step, then this
        lineage's by (attempt, step)."""
        self.start()
        return choose(scan(self.directory), self.lineage)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint for this process: its lineage's newest attempt's highest
        step; when its lineage has none, the highest step of any other lineage."""
        complete = self.checkpoints()
        return complete[-1] if complete else None

    def resume_point(self) -> Checkpoint | None:
        """Where to resume: the newer of ``$KUBETRAIN_RESUME_FROM`` and the latest checkpoint here."""
        candidates = [c for c in (self.latest(), self._from_env()) if c is not None]
        return max(candidates, key=lambda c: order_key(c, self.lineage)) if candidates else None

    def _from_env(self) -> Checkpoint | None:
        """The checkpoint ``$KUBETRAIN_RESUME_FROM`` names, when it is one of this directory's: the
        hint is the job's annotation, so a path anywhere else is refused (loading it could run code
        its author chose)."""
        hint = os.environ.get(ENV_RESUME_FROM, "")
        if not hint:
            return None
        path = Path(hint)
        if path.resolve().parent != self.directory.resolve():
            print(
                f"kubetrain.checkpoint: ignoring ${ENV_RESUME_FROM}={hint}: not a checkpoint in "
                f"{self.directory}, the only place this job resumes from",
                file=sys.stderr,
            )
            return None
        match = _NAME.match(path.name)
        if not match or not (path / MARKER).exists():
            return None
        meta = _read_meta(path)
        return Checkpoint(path, int(match[1]), meta) if meta is not None else None

    def load(
        self,
        checkpoint: Checkpoint,
        *,
        map_location: Any = None,
        weights_only: bool = False,
        state_dict: Any = None,
    ) -> Any:
        """The state stored in ``checkpoint``: read as plain data (tensors, numbers, strings,
        containers) where it is that, else fully unpickled, unless ``weights_only`` refuses that.

        A sharded checkpoint is loaded into ``state_dict`` in place, on every rank, resharded into
        the current world size (``kubetrain.checkpoint_sharded.load_sharded``), and that is returned.
        """
        if self._is_sharded(checkpoint):
            from kubetrain.checkpoint_sharded import load_sharded

            return load_sharded(self, checkpoint, state_dict)
        fmt = checkpoint.meta.get("format", "pt")
        return deserialise(
            fmt, self._state_bytes(checkpoint, fmt), map_location=map_location, weights_only=weights_only
        )

    def _state_bytes(self, checkpoint: Checkpoint, fmt: str) -> bytes:
        """The serialised state of a single-file checkpoint."""
        return (checkpoint.path / f"state.{fmt}").read_bytes()

    @staticmethod
    def _is_sharded(checkpoint: Checkpoint) -> bool:
        return checkpoint.meta.get("format") == "dcp"

    def load_latest(self, *, map_location: Any = None, state_dict: Any = None) -> tuple[Any, int] | None:
        """``(state, step)`` of the resume point, or None when training starts from scratch.

        Pass ``state_dict`` (on every rank) to load a sharded checkpoint into it (see ``load``); every
        rank then resumes from the checkpoint rank 0 chose, since the load is a collective. The ranks
        first agree on the fence: when a newer attempt has started, every rank raises ``FencedOff``,
        not rank 0 alone while the others wait for its choice."""
        if state_dict is not None:
            from kubetrain.checkpoint_sharded import Ranks, agree_on_fence

            agree_on_fence(self, Ranks(), "resume")
        for tries_left in reversed(range(3)):
            checkpoint = self.resume_point()
            if state_dict is not None:
                from kubetrain.checkpoint_sharded import agree_on_checkpoint

                checkpoint = agree_on_checkpoint(checkpoint)
            if checkpoint is None:
                return None
            try:
                state = self.load(checkpoint, map_location=map_location, state_dict=state_dict)
            except FileNotFoundError:
                if tries_left and state_dict is None:  # a collective load is not retried by one rank
                    continue  # moved by a save in progress elsewhere: look again
                raise
            self.resumed_from = checkpoint
            self.last_saved = checkpoint
            self.last_step = checkpoint.step
            return state, checkpoint.step
        return None  # pragma: no cover - the loop returns or raises

    # -- the termination report -------------------------------------------------------------------
    def report(self, *, status: str = "completed", metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON report the controller copies into the job (rank 0's termination message)."""
        report: dict[str, Any] = {
            "status": status,
            "step": self.last_step,
            "last_checkpoint": self.last_saved.location if self.last_saved else None,
            "metrics": {**self.last_metrics, **(metrics or {})},
            "attempt": str(self._ordinal),
        }
        if self.resumed_from is not None:
            report["resumed_from_step"] = self.resumed_from.step
        if self.fenced_by is not None:
            report["fenced_by"] = str(self.fenced_by)
        if self.error is not None:
            report["error"], report["traceback"] = self.error
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

    def _report_interrupted(self) -> None:
        """SIGTERM's report: ``interrupted``, unless one was written already (completed, fenced off),
        which then holds: a process stopped on its way out keeps what it reported."""
        if not self._reported:
            self.write_report(status="interrupted")

    def install_report_on_exit(self) -> None:
        """Write the report at exit and on SIGTERM (then exit 143), unless the script wrote its own.

        After ``save_on_termination``, SIGTERM only asks the loop to stop at its next ``end_of_step``
        (which saves one last checkpoint); without one within the wait, the process reports and exits.
        """
        if self._report_installed:
            return
        self._report_installed = True

        def report_at_exit() -> None:
            self._surface_at_exit()  # a background save's error belongs in the report
            if not self._reported:
                self.write_report(status="exited" if self.error is None else "failed")

        atexit.register(report_at_exit)
        previous_hook = sys.excepthook

        def on_exception(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
            # What the script died of goes into the report, so the job's failure can name it.
            lines = "".join(traceback.format_exception(kind, error, tb)).rstrip("\n").splitlines()
            message = traceback.format_exception_only(kind, error)[-1].strip()[:512]
            self.error = (message, "\n".join(lines[-20:])[-2048:])  # the report must fit MAX_REPORT_BYTES
            previous_hook(kind, error, tb)

        sys.excepthook = on_exception
        previous = signal.getsignal(signal.SIGTERM)

        def exit_now(signum: int, frame: FrameType | None) -> None:
            self._report_interrupted()
            if callable(previous):
                previous(signum, frame)
            os._exit(128 + signum)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            if self._final_state is None:
                self._let_in_flight_finish(self._termination_wait)  # the report then names it
                exit_now(signum, frame)
                return
            if self.termination_requested:
                return
            self.termination_requested = True
            print(
                f"kubetrain.checkpoint: SIGTERM: stopping at the end of this step to save a last checkpoint "
                f"(waiting at most {self._termination_wait:g}s)",
                file=sys.stderr,
                flush=True,
            )
            timer = threading.Timer(self._termination_wait, exit_now, (signum, None))
            timer.daemon = True
            timer.start()

        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            signal.signal(signal.SIGTERM, on_sigterm)

    # -- stopping when the pod is disrupted -------------------------------------------------------
    def save_on_termination(self, state: Callable[[], Any], *, wait: float = 20.0) -> None:
        """On SIGTERM (a preemption, an eviction, a node drain), save ``state()`` as one last checkpoint.

        SIGTERM can arrive in the middle of an optimizer step, when the model is half updated, so the
        checkpoint is not written from the signal handler: the handler sets ``termination_requested``,
        and the loop's next ``end_of_step(step)`` saves ``state()`` as checkpoint ``step`` and exits with
        code 143. If no ``end_of_step`` comes within ``wait`` seconds (keep it below the pod's
        ``terminationGracePeriodSeconds``), the process reports and exits without saving.
        """
        if wait <= 0:
            raise ValueError(f"wait must be positive (got {wait})")
        self._final_state = state
        self._termination_wait = wait
        self.install_report_on_exit()

    def end_of_step(self, step: int, *, stop: bool | None = None) -> None:
        """A point where the training state is consistent: if termination was requested, save there and exit.

        ``stop`` overrides ``termination_requested``: a distributed script passes what its ranks agreed
        (any rank's request, e.g. an all-reduce of the flag), so that every rank stops at the same step
        and rank 0 saves it even when only another rank's pod was disrupted. A save still in flight
        (``blocking=False``) is waited for first; the last checkpoint is then saved blocking.
        """
        if not (self.termination_requested if stop is None else stop):
            return
        try:
            self.wait()  # a save in flight commits first (it may be this very step)
        except Exception as error:
            print(f"kubetrain.checkpoint: the save in flight failed ({error}); saving now", file=sys.stderr)
        if self._final_state is not None and (self.last_saved is None or self.last_saved.step != step):
            self.save(self._final_state(), step)
        self.write_report(status="preempted")
        print(f"kubetrain.checkpoint: stopped at step {step} for termination", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_TERMINATED)
