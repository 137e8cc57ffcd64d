"""Checkpoints in object storage (``s3://bucket/prefix``, ``gs://``, any fsspec URL): a commit
protocol that needs no rename.

A checkpoint directory on a volume becomes visible with one atomic rename; an object store has no
rename of a "directory", and an upload cut off half way leaves some objects of it. So here a checkpoint
exists only once its **commit object** exists, and that is written last:

``<prefix>/step-<N>/<writer>/state.<fmt>``
    the state, under a name no other save uses (``a<attempt>-<token>-<random>[@<lineage>]``), so a
    committed checkpoint's objects are never written again;
``<prefix>/step-<N>/COMPLETE-a<attempt>[@<lineage>]``
    the commit: its manifest (step, attempt, lineage, world size, metrics, and each file with its size
    and SHA-256), written with a conditional create (``If-None-Match: *`` on S3, a generation
    precondition on GCS), so of two writers of one attempt that save the same step exactly one
    commits; the other's objects are garbage and it takes the committed checkpoint as the step's;
``<prefix>/.fence/attempt-<N>[@<lineage>]``
    the fence, as on a volume: each attempt records itself (create-only), and an attempt below its
    lineage's highest is refused before it writes and again before it commits (``FencedOff``, exit 86).

Readers trust only commits, and only those whose files are all there with the sizes the manifest
gives; loading checks each file's SHA-256 too. A writer killed at any point leaves either a committed
checkpoint or objects no commit names, which retention removes: older attempts' at once (they can no
longer commit), this attempt's after ``STALE_SECONDS`` (one may still be uploading). Retention keeps the
newest ``keep`` checkpoints of the writer's lineage and deletes older ones commit first, so a
checkpoint never half exists. Which checkpoint is the latest is decided as on a volume
(``kubetrain.checkpoint.order_key``).

The stores' own clients do the I/O (fsspec with s3fs or gcsfs, which send the conditional headers);
this module only decides names and order. Listing is strongly consistent on S3 and GCS, which the
protocol relies on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.checkpoint import (
    ENV_RESUME_FROM,
    FENCE_DIR,
    STALE_SECONDS,
    Checkpoint,
    CheckpointManager,
    _digest,
    configured_location,
    fence_mark,
    fence_of,
    order_key,
)

COMMIT = "COMPLETE"
_STEP = re.compile(r"^step-(\d+)$")
_COMMIT = re.compile(r"^COMPLETE-a(\d+)(?:@([A-Za-z0-9._-]+))?$")
_WRITER = re.compile(r"^a(\d+)-[0-9a-f]+-[0-9a-f]+(?:@([A-Za-z0-9._-]+))?$")


def commit_name(attempt: int, lineage: str | None) -> str:
    return f"{COMMIT}-a{attempt}" + ("" if lineage is None else f"@{lineage}")


@dataclass(frozen=True)
class Listing:
    """What a listing of the prefix holds: the commits, and the files under each writer's name."""

    commits: dict[str, int]  # commit key -> step
    files: dict[str, tuple[int, float]]  # data key -> (size, seconds since it was written)

    @staticmethod
    def of(root: str, objects: Mapping[str, Mapping[str, Any]], now: float) -> Listing:
        commits: dict[str, int] = {}
        files: dict[str, tuple[int, float]] = {}
        for key, info in objects.items():
            parts = key[len(root) :].strip("/").split("/")
            step = _STEP.match(parts[0]) if parts else None
            if step is None:
                continue
            if len(parts) == 2 and _COMMIT.match(parts[1]):
                commits[key] = int(step[1])
            elif len(parts) >= 3 and _WRITER.match(parts[1]):
                files[key] = (int(info.get("size") or 0), max(0.0, now - _modified(info, now)))
        return Listing(commits, files)


def _modified(info: Mapping[str, Any], now: float) -> float:
    stamp = info.get("LastModified") or info.get("updated") or info.get("mtime") or info.get("created")
    if isinstance(stamp, str):  # GCS: an RFC 3339 time
        with contextlib.suppress(ValueError):
            stamp = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if isinstance(stamp, dt.datetime):
        return stamp.timestamp()
    return float(stamp) if isinstance(stamp, int | float) else now


def complete(manifest: Mapping[str, Any], listing: Listing, step_prefix: str) -> bool:
    """Whether every file a commit's manifest names is there with its size."""
    files = manifest.get("files") or []
    writer = manifest.get("writer")
    if not files or not isinstance(writer, str):
        return False
    return all(
        listing.files.get(f"{step_prefix}/{writer}/{f.get('name')}", (-1, 0.0))[0] == f.get("size")
        for f in files
    )


def choose_committed(checkpoints: Iterable[Checkpoint], lineage: str | None) -> list[Checkpoint]:
    """One checkpoint per step (its newest commit for a process of ``lineage``), in ``order_key`` order."""
    best: dict[int, Checkpoint] = {}
    for checkpoint in checkpoints:
        current = best.get(checkpoint.step)
        if current is None or order_key(checkpoint, lineage) > order_key(current, lineage):
            best[checkpoint.step] = checkpoint
    return sorted(best.values(), key=lambda c: order_key(c, lineage))


def plan_retention(
    chosen: list[Checkpoint],
    listing: Listing,
    *,
    keep: int,
    attempt: int,
    lineage: str | None,
    fencing: bool,
    protect: str | None = None,
) -> list[str]:
    """The keys to delete, commits first: this lineage's checkpoints older than its newest ``keep``
    (none of a newer attempt, nor ``protect``) and the commits of its older attempts that no longer
    stand for their step, then the files no kept commit names that are this lineage's and cannot be
    committed any more (an older attempt's when fencing, or older than ``STALE_SECONDS``)."""
    own = [c for c in chosen if c.lineage == lineage]
    doomed = [c for c in own[:-keep] if c.attempt <= attempt and str(c.path) != protect]
    commits = [str(c.path) for c in doomed]
    standing = {str(c.path) for c in chosen}
    for key in listing.commits:  # this lineage's commits an older attempt left: superseded, or incomplete
        mark = _COMMIT.match(key.rsplit("/", 1)[-1])
        if mark and key not in standing and mark[2] == lineage and int(mark[1]) < attempt:
            commits.append(key)
    kept = tuple(_files_of(c) for c in chosen if c not in doomed)
    gone = tuple(_files_of(c) for c in doomed)
    files = []
    for key, (_, age) in listing.files.items():
        if key.startswith(kept):
            continue
        writer = _WRITER.match(key.rsplit("/", 2)[-2]) if key.count("/") >= 2 else None
        if writer is None or writer[2] != lineage:
            continue
        written_by = int(writer[1]) or 1
        if written_by > attempt:
            continue
        if (fencing and written_by < attempt) or age > STALE_SECONDS or key.startswith(gone):
            files.append(key)
    return commits + files


def _files_of(checkpoint: Checkpoint) -> str:
    """The prefix of the files a commit names: its writer's, beside the commit."""
    return f"{str(checkpoint.path).rsplit('/', 1)[0]}/{checkpoint.meta.get('writer')}/"


class ObjectStoreCheckpointManager(CheckpointManager):
    """``CheckpointManager`` for a location that is an object-store URL (``CheckpointManager`` makes
    one of these by itself for such a location): the same methods and report, over the protocol above."""

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        keep: int = 3,
        rank: int | None = None,
        attempt: int | None = None,
        lineage: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        import fsspec  # the objectstore extra (s3fs), or the store's own fsspec package

        location = configured_location(directory)
        super().__init__(location, keep=keep, rank=rank, attempt=attempt, lineage=lineage)
        self.url = location.rstrip("/")
        options = {"use_listings_cache": False, "skip_instance_cache": True, **(storage_options or {})}
        self._options = options
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        self.root = self.root.rstrip("/")
        self._scheme = self.url.split("://", 1)[0]

    @property
    def location(self) -> str:
        return self.url

    def _url(self, key: str) -> str:
        return f"{self._scheme}://{key.lstrip('/')}"

    # -- the fence -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started or not self._fencing:
            return
        assert self.attempt is not None
        record = json.dumps({"attempt": self.attempt, "lineage": self.lineage, "time": time.time()}).encode()
        with contextlib.suppress(FileExistsError):  # recorded by another process of this attempt
            self.fs.pipe_file(
                f"{self.root}/{FENCE_DIR}/{fence_mark(self.attempt, self.lineage)}", record, mode="create"
            )
        self._started = True
        self._check_fence("start")

    def fence(self) -> int | None:
        try:
            names = [key.rsplit("/", 1)[-1] for key in self.fs.ls(f"{self.root}/{FENCE_DIR}", detail=False)]
        except FileNotFoundError:
            return None
        return fence_of(names, self.lineage)

    # -- saving ----------------------------------------------------------------------------------
    def _save_payload(
        self, step: int, fmt: str, payload: bytes, metrics: dict[str, Any] | None
    ) -> Checkpoint:
        """Upload the serialised state under this save's writer name, then commit it (``_commit``).

        When another writer of this attempt committed ``step`` first, its checkpoint is the step's and
        is returned."""
        writer = self._writer()
        step_prefix = f"{self.root}/step-{step:08d}"
        name = f"state.{fmt}"
        self.fs.pipe_file(f"{step_prefix}/{writer}/{name}", payload)
        manifest = {
            **self._meta(step, fmt, metrics),
            "world_size": int(os.environ.get("WORLD_SIZE") or 1),
            "files": [_digest(name, [payload])],
        }
        return self._commit(step, step_prefix, writer, manifest)

    def _commit(self, step: int, step_prefix: str, writer: str, manifest: dict[str, Any]) -> Checkpoint:
        """Create the commit object of the files under ``<step_prefix>/<writer>/`` (conditionally: of two
        writers of one attempt exactly one commits a step), the fence checked right before; apply
        retention."""
        refusal = f"save step {step}"
        manifest = {**manifest, "writer": writer}
        self._check_fence(refusal)
        commit = f"{step_prefix}/{commit_name(self._ordinal, self.lineage)}"
        try:
            self.fs.pipe_file(commit, json.dumps(manifest).encode(), mode="create")
        except FileExistsError:
            with contextlib.suppress(OSError):
                self.fs.rm(f"{step_prefix}/{writer}", recursive=True)
            taken = json.loads(self.fs.cat_file(commit))
            print(
                f"kubetrain.checkpoint: step {step} was committed by another writer of attempt "
                f"{self._ordinal} first ({taken.get('writer')}); keeping that one",
                file=sys.stderr,
                flush=True,
            )
            manifest = taken
        checkpoint = Checkpoint(Path(commit), step, manifest, url=self._url(step_prefix))
        self.last_saved = checkpoint
        self._check_fence(refusal)
        self._clean_up(protect=commit)
        return checkpoint

    # -- where a sharded save's ranks write (kubetrain.checkpoint_sharded drives them) -----------
    def _shards_prepare(self, step: int) -> str:
        return f"{self.root}/step-{step:08d}/{self._writer()}"  # nothing to create in a store

    def _shards_storage(self, place: str, *, write: bool) -> Any:
        from torch.distributed.checkpoint.fsspec_filesystem import FsspecReader, FsspecWriter

        url = self._url(place)
        if write:  # an object is durable once its upload completes: no fsync to ask for
            return FsspecWriter(url, sync_files=False, **self._options)
        return FsspecReader(url, **self._options)

    def _shards_digest(self, place: str, name: str) -> dict[str, Any]:
        with self.fs.open(f"{place}/{name}", "rb") as handle:
            return _digest(name, iter(lambda: handle.read(1 << 20), b""))

    def _shards_sizes(self, place: str) -> dict[str, int]:
        try:
            found = self.fs.find(place, detail=True)
        except FileNotFoundError:
            return {}
        return {key[len(place) :].lstrip("/"): int(info.get("size") or 0) for key, info in found.items()}

    def _shards_commit(self, step: int, place: str, manifest: dict[str, Any]) -> Checkpoint:
        step_prefix, writer = place.rsplit("/", 1)
        return self._commit(step, step_prefix, writer, manifest)

    def _shards_discard(self, place: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.rm(place, recursive=True)

    def _shards_place(self, checkpoint: Checkpoint) -> str:
        return _files_of(checkpoint).rstrip("/")

    def _clean_up(self, *, protect: Path | str | None = None) -> None:
        listing = self._listing()
        doomed = plan_retention(
            self._committed(listing),
            listing,
            keep=self.keep,
            attempt=self._ordinal,
            lineage=self.lineage,
            fencing=self._fencing,
            protect=None if protect is None else str(protect),
        )
        for key in doomed:  # commits first: a checkpoint is gone before any of its files is
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(key)

    # -- finding and loading ---------------------------------------------------------------------
    def _listing(self) -> Listing:
        try:
            objects = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            objects = {}
        return Listing.of(self.root, objects, time.time())

    def _committed(self, listing: Listing) -> list[Checkpoint]:
        found = []
        for key, step in listing.commits.items():
            try:
                manifest = json.loads(self.fs.cat_file(key))
            except (FileNotFoundError, ValueError):
                continue  # deleted meanwhile, or not ours
            step_prefix = key.rsplit("/", 1)[0]
            if isinstance(manifest, dict) and complete(manifest, listing, step_prefix):
                found.append(Checkpoint(Path(key), step, manifest, url=self._url(step_prefix)))
        return choose_committed(found, self.lineage)

    def checkpoints(self) -> list[Checkpoint]:
        self.start()
        return self._committed(self._listing())

    def _from_env(self) -> Checkpoint | None:
        """The checkpoint ``$KUBETRAIN_RESUME_FROM`` names, when it is a step of this location."""
        hint = os.environ.get(ENV_RESUME_FROM, "").rstrip("/")
        if not hint:
            return None
        parent, _, name = hint.rpartition("/")
        step = _STEP.match(name)
        if parent != self.url or step is None:
            print(
                f"kubetrain.checkpoint: ignoring ${ENV_RESUME_FROM}={hint}: not a checkpoint in {self.url}, "
                "the only place this job resumes from",
                file=sys.stderr,
            )
            return None
        return next((c for c in reversed(self.checkpoints()) if c.step == int(step[1])), None)

    def _state_bytes(self, checkpoint: Checkpoint, fmt: str) -> bytes:
        """A committed single-file checkpoint's state, its SHA-256 checked against the manifest."""
        [entry] = checkpoint.meta["files"]
        key = f"{_files_of(checkpoint)}{entry['name']}"
        data: bytes = self.fs.cat_file(key)
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise ValueError(f"{self._url(key)} does not match its commit's checksum: the object was changed")
        return data
