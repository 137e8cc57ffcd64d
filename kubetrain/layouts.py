"""Which checkpoints of the common trainers a checkpoint location holds, and which is the newest complete one.

Training code written against ``kubetrain.checkpoint`` resumes through ``CheckpointManager``; code that
runs a trainer of its own (Hugging Face ``Trainer``, Lightning, a torch.distributed.checkpoint loop)
resumes through that trainer, from a checkpoint the trainer wrote. This module finds that checkpoint
without loading it, in a local directory or an object-store URL (through fsspec, as
``kubetrain.checkpoint_objects`` does), looking only at the location's top level:

``checkpoint-<N>/`` (Hugging Face ``Trainer``)
    complete once it holds ``trainer_state.json`` (written after the weights, optimizer and scheduler)
    and no ``checkpoint-is-incomplete.txt`` (the sentinel of the Trainer's SIGTERM checkpoint); its
    step is that file's ``global_step``.
``*.ckpt`` (Lightning, ``last.ckpt`` included)
    complete when it is a whole torch zip archive; its step is the ``global_step`` its pickle names,
    read from the archive's index and ``data.pkl`` alone (the opcodes are walked, never run, and no
    tensor is read), else the ``step=N`` of its name.
``<name>/.metadata`` (torch.distributed.checkpoint)
    the metadata is written last, so a directory of ``*.distcp`` shards without it is incomplete; its
    step is the last number of its name.
``step-<N>/`` with ``COMPLETE`` (kubetrain's own, ``COMPLETE-a<attempt>`` in an object store)
    recognised so it is neither loaded as something else nor named unknown; which of them to resume
    from, with fencing and lineages, is ``CheckpointManager``'s decision.

A save under way is skipped: a temporary name (hidden, ``tmp-…``, ``….tmp``, ``….partial``), an empty
or truncated file, a directory whose completion mark is missing. Any other directory is named unknown
(a warning says so) and never loaded. The decisions (``identify``, ``newest``, ``step_of_pickle``) are
pure; ``detect`` is the I/O around them.
"""

from __future__ import annotations

import io
import json
import logging
import pickletools
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubetrain.checkpoint import MARKER
from kubetrain.locations import is_url

log = logging.getLogger(__name__)

HF = "hf"
LIGHTNING = "lightning"
DCP = "dcp"
KUBETRAIN = "kubetrain"

HF_STATE = "trainer_state.json"
HF_INCOMPLETE = "checkpoint-is-incomplete.txt"  # the Trainer's SIGTERM ("JIT") checkpoint, until done
DCP_METADATA = ".metadata"
LIGHTNING_SUFFIX = ".ckpt"
# Folders a trainer keeps beside its checkpoints that are not checkpoints: never named unknown.
NOT_CHECKPOINTS = frozenset({"runs", "lightning_logs", "logs", "wandb", "mlruns", "tensorboard"})

_HF_NAME = re.compile(r"^checkpoint-(\d+)$")
_KUBETRAIN_NAME = re.compile(r"^step-(\d+)$")
_STEP_IN_NAME = re.compile(r"(?:^|[^A-Za-z])step[=_-]?(\d+)")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")
_TEMPORARY = re.compile(r"^(\.|tmp[-_.])|\.(tmp|partial|part|incomplete)$|~$", re.IGNORECASE)


@dataclass(frozen=True)
class Entry:
    """One name at the top of a checkpoint location: a directory with its children's names, or a file."""

    name: str
    is_dir: bool
    children: frozenset[str] = frozenset()
    size: int = 0
    modified: float = 0.0


@dataclass(frozen=True)
class Found:
    """A checkpoint of a known layout. ``step`` is None when nothing tells it (it then sorts first)."""

    layout: str
    location: str
    step: int | None
    modified: float = 0.0


@dataclass(frozen=True)
class Detection:
    """What a location holds: its complete checkpoints, oldest first, and what was passed over."""

    checkpoints: list[Found] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # saves under way or cut off: skipped
    unknown: list[str] = field(default_factory=list)  # not a layout this module knows: never loaded

    def newest(self, layout: str | None = None) -> Found | None:
        """The newest complete checkpoint (of ``layout``, when given)."""
        return newest(c for c in self.checkpoints if layout is None or c.layout == layout)


@dataclass(frozen=True)
class Identified:
    """What ``identify`` makes of one entry before any file is read.

    ``kind``: "checkpoint", "incomplete", "unknown" or "other" (not a checkpoint, e.g. a log file);
    ``read``: the file whose content tells the step and completeness (HF's trainer state, a .ckpt)."""

    kind: str
    layout: str | None = None
    step: int | None = None
    read: str | None = None


def step_in_name(name: str) -> int | None:
    """The ``step=N`` (``step_N``, ``step-N``) of a checkpoint's name, or None."""
    match = _STEP_IN_NAME.search(name)
    return int(match[1]) if match else None


def identify(entry: Entry) -> Identified:
    """The layout of one top-level entry from its name and its children's names alone."""
    if _TEMPORARY.search(entry.name):
        is_save = entry.is_dir or LIGHTNING_SUFFIX in entry.name.lower()
        return Identified("incomplete" if is_save and not entry.name.startswith(".") else "other")
    if not entry.is_dir:
        return _identify_file(entry)
    for check in (_kubetrain_committed, _hf_directory, _dcp_directory, _kubetrain_uncommitted):
        if (identified := check(entry)) is not None:
            return identified
    return Identified("other" if entry.name in NOT_CHECKPOINTS else "unknown")


def _identify_file(entry: Entry) -> Identified:
    if not entry.name.endswith(LIGHTNING_SUFFIX):
        return Identified("other")
    if entry.size <= 0:
        return Identified("incomplete", LIGHTNING)
    return Identified("checkpoint", LIGHTNING, step_in_name(entry.name), read=entry.name)


def _kubetrain_committed(entry: Entry) -> Identified | None:
    match = _KUBETRAIN_NAME.match(entry.name)
    if match and any(child == MARKER or child.startswith(MARKER + "-") for child in entry.children):
        return Identified("checkpoint", KUBETRAIN, int(match[1]))
    return None


def _kubetrain_uncommitted(entry: Entry) -> Identified | None:
    """A save of kubetrain's own whose marker is not written (yet)."""
    match = _KUBETRAIN_NAME.match(entry.name)
    return Identified("incomplete", KUBETRAIN, int(match[1])) if match else None


def _hf_directory(entry: Entry) -> Identified | None:
    match = _HF_NAME.match(entry.name)
    if not match:
        return None
    if HF_STATE in entry.children and HF_INCOMPLETE not in entry.children:
        return Identified("checkpoint", HF, int(match[1]), read=f"{entry.name}/{HF_STATE}")
    return Identified("incomplete", HF, int(match[1]))


def _dcp_directory(entry: Entry) -> Identified | None:
    if DCP_METADATA in entry.children:
        number = _LAST_NUMBER.search(entry.name)
        return Identified("checkpoint", DCP, int(number[1]) if number else None)
    if any(child.endswith(".distcp") for child in entry.children):
        return Identified("incomplete", DCP)
    return None


def hf_step(trainer_state: bytes) -> int | None:
    """The ``global_step`` of an HF ``trainer_state.json``; None when it is not (yet) whole JSON."""
    try:
        state = json.loads(trainer_state)
    except ValueError:
        return None
    step = state.get("global_step") if isinstance(state, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


_INT_OPS = frozenset({"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"})
_MEMO_OPS = frozenset({"MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"})
_TEXT_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"})


def step_of_pickle(data: bytes, key: str = "global_step") -> int | None:
    """The integer stored under ``key`` in a pickled dict, found by walking the opcodes (nothing is
    unpickled, so no code runs): the first ``key`` string followed directly by an integer."""
    previous_was_key = False
    try:
        for opcode, argument, _ in pickletools.genops(data):
            if opcode.name in _MEMO_OPS:
                continue  # remembering the key string: the value comes next
            if previous_was_key and opcode.name in _INT_OPS and isinstance(argument, int):
                return argument
            previous_was_key = opcode.name in _TEXT_OPS and argument == key
    except (ValueError, EOFError):  # pickletools raises ValueError for a cut-off or foreign stream
        return None
    return None


def lightning_step(archive: io.IOBase | Any) -> tuple[bool, int | None]:
    """Whether a ``.ckpt`` (an open, seekable binary file) is a whole torch zip archive, and the
    ``global_step`` its ``data.pkl`` names (None when it names none)."""
    try:
        with zipfile.ZipFile(archive) as opened:
            pickles = [n for n in opened.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if not pickles:
                return False, None
            return True, step_of_pickle(opened.read(pickles[0]))
    except (zipfile.BadZipFile, OSError, EOFError):
        return False, None


def newest(checkpoints: Iterable[Found]) -> Found | None:
    """The one with the highest step; of equal steps the last written. Unknown steps come first."""
    ordered = sorted(checkpoints, key=_order)
    return ordered[-1] if ordered else None


def _order(found: Found) -> tuple[int, float]:
    return (-1 if found.step is None else found.step, found.modified)


# -- the I/O around them ------------------------------------------------------------------------


def detect(location: str, *, storage_options: Mapping[str, Any] | None = None) -> Detection:
    """Every complete checkpoint of a known layout at the top of ``location`` (a path or an fsspec URL),
    oldest first, with what was skipped; an unknown layout is logged as a warning."""
    import fsspec  # the objectstore extra for URLs; a local path needs only fsspec itself

    options = {"use_listings_cache": False, "skip_instance_cache": True, **(storage_options or {})}
    fs, root = fsspec.core.url_to_fs(location, **(options if is_url(location) else {}))
    root = root.rstrip("/") or "/"
    checkpoints: list[Found] = []
    incomplete: list[str] = []
    unknown: list[str] = []
    for entry in _entries(fs, root):
        where = _join(location, entry.name)
        identified = identify(entry)
        if identified.kind == "checkpoint":
            found = _read_step(fs, root, entry, identified, where)
            (incomplete.append(where) if found is None else checkpoints.append(found))
        elif identified.kind == "incomplete":
            incomplete.append(where)
        elif identified.kind == "unknown":
            unknown.append(where)
    for name in unknown:
        log.warning("%s: not a checkpoint layout kubetrain knows (docs/checkpoints.md); not loaded", name)
    return Detection(sorted(checkpoints, key=_order), incomplete, unknown)


def _join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}"


def _entries(fs: Any, root: str) -> list[Entry]:
    try:
        listed = fs.ls(root, detail=True)
    except FileNotFoundError:
        return []
    entries = []
    for info in listed:
        name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
        is_dir = info.get("type") == "directory"
        children: frozenset[str] = frozenset()
        if is_dir:
            try:
                children = frozenset(
                    str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(info["name"], detail=False)
                )
            except FileNotFoundError:
                continue  # removed meanwhile (retention)
        entries.append(Entry(name, is_dir, children, int(info.get("size") or 0), _modified(info)))
    return entries


def _modified(info: Mapping[str, Any]) -> float:
    value = info.get("mtime") or info.get("LastModified") or info.get("created") or 0.0
    timestamp = getattr(value, "timestamp", None)
    return float(timestamp() if callable(timestamp) else value)


def _read_step(fs: Any, root: str, entry: Entry, identified: Identified, where: str) -> Found | None:
    """The checkpoint with its step read from its own files; None when they show a save under way."""
    assert identified.layout is not None
    step = identified.step
    if identified.read is not None:
        path = f"{root}/{identified.read}"
        try:
            if identified.layout == HF:
                step = hf_step(fs.cat_file(path))
                if step is None:
                    return None
            else:
                with fs.open(path, "rb") as handle:
                    whole, from_file = lightning_step(handle)
                if not whole:
                    return None
                step = from_file if from_file is not None else step
        except FileNotFoundError:
            return None  # removed meanwhile (retention)
    return Found(identified.layout, where, step, entry.modified)
