"""Sharded checkpoints: every rank writes its own part with ``torch.distributed.checkpoint`` (DCP), and
the checkpoint exists only once all of them have finished.

Why: a model sharded with FSDP2 or DTensor has no rank that holds all of it; gathering it onto rank 0
to ``torch.save`` it costs that rank the whole model's memory and the job all of its write time. DCP
has each rank write what it holds, in parallel, and loads a checkpoint into any world size (it
reshards). But DCP has no notion of a committed checkpoint and no fencing, so this module puts DCP's
files where the single-file save puts its one file and publishes them with the same commit:

- on a volume, into the temporary directory ``.tmp-step-<N>-<writer>`` that rank 0 creates; rank 0
  then writes ``meta.json`` and ``COMPLETE`` and renames it to ``step-<N>``;
- in object storage, under ``step-<N>/<writer>/``; rank 0 then creates the commit object
  ``step-<N>/COMPLETE-a<attempt>[@<lineage>]`` conditionally.

Rank 0 commits only after every rank has returned from ``dcp.save`` and hashed the files it wrote
(the sizes and SHA-256 are gathered into the manifest), so a commit never names a file that is still
being written. A rank that dies before that leaves no commit: its files are garbage that retention
removes, as an uncommitted single-file upload is. Every rank reads the fence before writing, and the
ranks agree on the highest fence any of them saw, so either all write or all raise ``FencedOff``;
rank 0 reads it again right before committing and tells the others what came of the commit. Whatever
fails on one rank is raised on every rank, so no rank is left waiting in a collective for one that
gave up.

When a save is sharded: ``save(state, step, sharded=True)`` or ``sharded=False`` decides; left out
(None), a save is sharded when ``torch.distributed`` is initialised and the state holds a DTensor or a
ShardedTensor (FSDP2, tensor parallelism), and rank 0's ``torch.save`` otherwise. A plain DDP model's
state is the same on every rank: ``sharded=True`` has DCP spread its write over the ranks.

``save(..., blocking=False)``: DCP's ``async_save`` stages every rank's shards into host memory before
``save`` returns; the write, the hashes and the commit then run in the manager's background save
(``kubetrain.checkpoint_async``), their collectives on a gloo process group made for them, so they
never interleave with the training loop's collectives on the default group.

torch is imported inside the functions only: the controller and the client import
``kubetrain.checkpoint`` and must not pull torch in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kubetrain.checkpoint import Checkpoint, FencedOff

if TYPE_CHECKING:
    from kubetrain.checkpoint import CheckpointManager

FORMAT = "dcp"  # a manifest's or meta's "format" for a sharded checkpoint
DCP_METADATA = ".metadata"  # what DCP's coordinator writes last, describing every shard
_RANK_FILE = re.compile(r"^__(\d+)_\d+\.distcp$")  # DCP's file-system writers name a rank's files so
_SHARD_TYPES = ("DTensor", "ShardedTensor")
T = TypeVar("T")


class ShardedSaveError(RuntimeError):
    """A sharded save or load failed on some rank; raised on every rank, naming the ranks and errors."""


# -- pure decisions ------------------------------------------------------------------------------
def _is_shard(value: Any) -> bool:
    return any(
        kind.__name__ in _SHARD_TYPES and kind.__module__.startswith("torch.distributed")
        for kind in type(value).__mro__
    )


def holds_shards(state: Any) -> bool:
    """Whether ``state`` (nested dicts, lists and tuples) holds a DTensor or ShardedTensor value."""
    pending = [state]
    while pending:
        value = pending.pop()
        if isinstance(value, Mapping):
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
        elif _is_shard(value):
            return True
    return False


def is_sharded_save(requested: bool | None, state: Any, distributed: bool) -> bool:
    """Whether a save goes through DCP: as ``requested``; when None, when the process group is
    initialised (``distributed``) and the state holds shards."""
    if requested is not None:
        return requested
    return distributed and holds_shards(state)


def own_files(files: Iterable[str], rank: int) -> list[str]:
    """The files of a DCP checkpoint that ``rank`` wrote and hashes: its ``__<rank>_<n>.distcp``;
    rank 0 also every other file (``.metadata``, which it writes as the coordinator)."""
    mine = []
    for name in sorted(set(files)):
        match = _RANK_FILE.match(name)
        if (int(match[1]) == rank) if match else rank == 0:
            mine.append(name)
    return mine


def unseen(entries: Iterable[Mapping[str, Any]], sizes: Mapping[str, int]) -> list[str]:
    """The files of a manifest that rank 0 does not see in the save's place with their size."""
    return [str(e["name"]) for e in entries if sizes.get(str(e["name"])) != e.get("size")]


def highest_fence(seen: Iterable[int | None]) -> int | None:
    """The highest fence any rank read (None: none recorded)."""
    return max((fence for fence in seen if fence is not None), default=None)


# -- the ranks -----------------------------------------------------------------------------------
class Ranks:
    """The collectives a sharded save needs: ``torch.distributed``'s when it is initialised, else those
    of a world of one process."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self._dist = dist if dist.is_available() and dist.is_initialized() else None
        self.group = group  # None: the default process group
        self.rank = int(self._dist.get_rank()) if self._dist else 0
        self.size = int(self._dist.get_world_size(group)) if self._dist else 1
        self.alone = self._dist is None  # no process group: DCP is told so (no_dist)

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value``, on every rank."""
        if self._dist is None:
            return value
        box: list[Any] = [value]
        self._dist.broadcast_object_list(box, src=0, group=self.group)
        result: T = box[0]
        return result

    def all_gather(self, value: T) -> list[T]:
        """Every rank's ``value``, in rank order, on every rank."""
        if self._dist is None:
            return [value]
        gathered: list[Any] = [None] * self.size
        self._dist.all_gather_object(gathered, value, group=self.group)
        return gathered

    def together(self, work: Callable[[], T]) -> list[T]:
        """Run ``work`` on every rank and gather the results; if it raised on any rank, raise on every
        rank (this one's own exception where it failed), so no rank waits for one that gave up."""
        try:
            value: T | None = work()
            failure = None
        except Exception as error:
            value, failure = None, error
        gathered = self.all_gather(
            (value, None if failure is None else f"{type(failure).__name__}: {failure}")
        )
        if failure is not None:
            raise failure
        failed = [f"rank {rank}: {error}" for rank, (_, error) in enumerate(gathered) if error is not None]
        if failed:
            raise ShardedSaveError("; ".join(failed))
        return [result for result, _ in gathered]  # type: ignore[misc]  # no rank failed: all are T


# -- saving and loading --------------------------------------------------------------------------
def save_sharded(
    manager: CheckpointManager,
    state: Any,
    step: int,
    metrics: dict[str, Any] | None,
    *,
    blocking: bool = True,
) -> Checkpoint | None:
    """Save ``state`` as checkpoint ``step`` from every rank (call it on every rank), commit it on rank 0
    once all have written; every rank returns the committed checkpoint (see the module docstring).

    ``blocking=False``: return once DCP has staged the state into host memory (``async_save``); the
    write, the hashes and the commit go on in the manager's ``BackgroundSave``, their collectives on a
    process group of their own, so they never interleave with the training loop's. Returns None then.
    """
    ranks = Ranks()
    manager.last_step = step
    if metrics:
        manager.last_metrics = dict(metrics)
    agree_on_fence(manager, ranks, f"save step {step}")
    place = ranks.together(lambda: manager._shards_prepare(step) if ranks.rank == 0 else "")[0]
    writer = manager._shards_storage(place, write=True)
    if blocking:
        from torch.distributed.checkpoint.state_dict_saver import save

        def write() -> Any:
            return save(state, storage_writer=writer, no_dist=ranks.alone)

        return _finish(manager, ranks, place, step, metrics, write=write)
    from torch.distributed.checkpoint.state_dict_saver import async_save

    background = Ranks(manager._background_group())
    try:
        staged = async_save(state, storage_writer=writer, process_group=background.group, no_dist=ranks.alone)
    except BaseException:
        if ranks.rank == 0:
            manager._shards_discard(place)
        raise
    upload: Any = getattr(staged, "upload_completion", staged)  # a Future, or a response holding one
    manager._in_background(
        step, lambda: _finish(manager, background, place, step, metrics, write=upload.result)
    )
    return None


def _finish(
    manager: CheckpointManager,
    ranks: Ranks,
    place: str,
    step: int,
    metrics: dict[str, Any] | None,
    *,
    write: Callable[[], Any],
) -> Checkpoint:
    """Have every rank write its shards (``write`` returns DCP's metadata) and hash them; then rank 0
    commits and tells the others what came of it."""
    try:
        metadata = write()
        files = {info.relative_path for info in metadata.storage_data.values()} | {DCP_METADATA}
        mine = own_files(files, ranks.rank)
        digests = ranks.together(lambda: [manager._shards_digest(place, name) for name in mine])
    except BaseException:
        if ranks.rank == 0:
            manager._shards_discard(place)
        raise
    if ranks.rank == 0:
        try:
            written = sorted((entry for entries in digests for entry in entries), key=lambda f: f["name"])
            if missing := unseen(written, manager._shards_sizes(place)):
                raise ShardedSaveError(
                    f"rank 0 does not see {', '.join(missing)} in {place}, which other ranks wrote: a sharded "
                    "save needs a location every rank shares (object storage, or a ReadWriteMany volume)"
                )
            manifest = {**manager._meta(step, FORMAT, metrics), "world_size": ranks.size, "files": written}
            checkpoint = manager._shards_commit(step, place, manifest)
        except FencedOff as fenced:
            ranks.broadcast(("fenced", fenced.fence))
            raise
        except BaseException as error:
            manager._shards_discard(place)
            ranks.broadcast(("failed", f"rank 0: {type(error).__name__}: {error}"))
            raise
        ranks.broadcast(("committed", checkpoint))
        return checkpoint
    received: tuple[str, Any] = ranks.broadcast(("", None))
    outcome, detail = received
    if outcome == "fenced":
        manager._fenced_off(int(detail), f"save step {step}")
    if outcome != "committed" or not isinstance(detail, Checkpoint):
        raise ShardedSaveError(f"step {step} was not committed: {detail}")
    manager.last_saved = detail
    return detail


def agree_on_fence(manager: CheckpointManager, ranks: Ranks, refusal: str) -> None:
    """Rank 0 records this attempt; every rank reads the fence; all raise ``FencedOff`` if any rank saw
    a newer attempt of this lineage."""
    seen: int | None = None
    if manager.attempt is not None:
        try:
            if ranks.rank == 0:
                manager.start()
            seen = manager.fence()
        except FencedOff as fenced:
            seen = fenced.fence
    fence = highest_fence(ranks.all_gather(seen))
    if manager.attempt is not None and fence is not None and fence > manager.attempt:
        manager._fenced_off(fence, refusal)


def agree_on_checkpoint(checkpoint: Checkpoint | None) -> Checkpoint | None:
    """Rank 0's choice of the checkpoint to resume from, on every rank (each may have listed the
    location at another moment, or been given another hint)."""
    return Ranks().broadcast(checkpoint)


def load_sharded(manager: CheckpointManager, checkpoint: Checkpoint, state_dict: Any) -> Any:
    """Load a sharded checkpoint into ``state_dict`` in place (call it on every rank): DCP reshards it
    into the current world size, whatever the world size that saved it. Each rank first checks the
    SHA-256 of its share of the files against the manifest. Returns ``state_dict``."""
    if state_dict is None:
        raise ValueError(
            f"{checkpoint.location} is a sharded (DCP) checkpoint: it loads into a state dict, so pass "
            "state_dict= (the model's own, e.g. from torch.distributed.checkpoint.state_dict.get_state_dict)"
        )
    from torch.distributed.checkpoint.state_dict_loader import load

    ranks = Ranks()
    place = manager._shards_place(checkpoint)
    expected = {f["name"]: f for f in checkpoint.meta.get("files") or [] if isinstance(f, dict)}
    share = sorted(expected)[ranks.rank :: ranks.size]

    def verify() -> None:
        for name in share:
            found = manager._shards_digest(place, name)
            if (found["size"], found["sha256"]) != (expected[name].get("size"), expected[name].get("sha256")):
                raise ValueError(f"{place}/{name} does not match its commit's checksum: the file was changed")

    ranks.together(verify)
    load(state_dict, storage_reader=manager._shards_storage(place, write=False), no_dist=ranks.alone)
    return state_dict
