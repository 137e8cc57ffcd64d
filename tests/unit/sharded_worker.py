"""One rank of a sharded-checkpoint test (``tests/unit/test_checkpoint_sharded.py`` starts two):
``python -m tests.unit.sharded_worker SCENARIO RANK WORLD PORT LOCATION``. It fails (a non-zero exit)
when an expectation does not hold; the test then checks what it left in the checkpoint location.

Also home of ``SharedStore``, the object store the test processes share: local files under the URL's
path, with the create-only write (``If-None-Match: *``) the commit needs.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

STORE = "ktstore"


class SharedStore(LocalFileSystem):  # type: ignore[misc]
    protocol = (STORE,)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(auto_mkdir=True, **kwargs)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        path = str(path)
        if path.startswith(f"{STORE}://"):
            path = "/" + path[len(f"{STORE}://") :].lstrip("/")
        return super()._strip_protocol(path)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        if mode != "create":
            super().pipe_file(path, value, **kwargs)
            return
        path = self._strip_protocol(path)
        self.makedirs(self._parent(path), exist_ok=True)
        with open(path, "xb") as handle:  # FileExistsError when it exists, as S3 answers 412
            handle.write(value)


fsspec.register_implementation(STORE, SharedStore, clobber=True)


def model(seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Linear(4, 4)


def full(state: dict[str, Any]) -> dict[str, Any]:
    """Plain tensors of a state dict that may hold DTensors."""
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in state.items()
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def committed(ckpt: Any) -> Any:
    """What the manager reports as its last checkpoint."""
    return ckpt.last_saved


def fsdp(seed: int, mesh: Any) -> Any:
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model(seed), mesh=mesh)


def save_then_load(rank: int, location: str, mesh: Any) -> None:
    """FSDP2 (DTensor) state saved by both ranks; a save that fails on rank 1 commits nothing; loads back."""
    from kubetrain.checkpoint import CheckpointManager

    ckpt = CheckpointManager(location, attempt=1)
    sharded = fsdp(0, mesh)
    saved = ckpt.save({"model": sharded.state_dict(), "epoch": 3}, 10)  # sharded: it holds DTensors
    assert saved is not None and saved.step == 10 and saved.meta["format"] == "dcp", saved
    assert saved.meta["world_size"] == 2 and ckpt.last_saved == saved

    real = ckpt._shards_digest

    def broken(place: str, name: str) -> dict[str, Any]:
        if rank == 1:
            raise OSError("rank 1 could not read back its shard")
        return real(place, name)

    ckpt._shards_digest = broken  # type: ignore[method-assign]
    try:
        ckpt.save({"model": sharded.state_dict(), "epoch": 4}, 20)
    except Exception as error:
        assert "rank 1" in str(error), error
    else:
        raise AssertionError("a save that failed on rank 1 returned")
    ckpt._shards_digest = real  # type: ignore[method-assign]
    latest = ckpt.latest()
    assert latest is not None and latest.step == 10, f"rank {rank}: {latest}"

    fresh = fsdp(1, mesh)
    state = {"model": fresh.state_dict(), "epoch": 0}
    resumed = CheckpointManager(location, attempt=1).load_latest(state_dict=state)
    assert resumed is not None and resumed[1] == 10 and state["epoch"] == 3, resumed
    assert same(full(fresh.state_dict()), full(model(0).state_dict())), "loaded tensors differ"


def load_then_save(rank: int, location: str, mesh: Any) -> None:
    """Load what one process saved into two ranks' FSDP2 shards (from rank 0's choice of checkpoint);
    save a DDP model's state sharded; a stale attempt is refused on every rank before it writes."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from kubetrain.checkpoint import CheckpointManager, FencedOff

    ckpt = CheckpointManager(location, attempt=1)
    if rank == 1:  # rank 1 finds nothing (it listed too early, say): it resumes from rank 0's choice
        ckpt.resume_point = lambda: None  # type: ignore[method-assign]
    fresh = fsdp(1, mesh)
    state = {"model": fresh.state_dict(), "epoch": 0}
    resumed = ckpt.load_latest(state_dict=state)
    assert resumed is not None and resumed[1] == 5 and state["epoch"] == 5, resumed
    assert same(full(fresh.state_dict()), full(model(0).state_dict())), "resharded tensors differ"

    ddp = DistributedDataParallel(model(2))
    saved = ckpt.save({"model": ddp.module.state_dict(), "epoch": 6}, 6, sharded=True)
    assert saved is not None and saved.step == 6 and saved.meta["world_size"] == 2, saved

    if rank == 0:
        CheckpointManager(location, attempt=2).start()  # a newer attempt has started
    dist.barrier()
    try:
        ckpt.save({"model": ddp.module.state_dict(), "epoch": 7}, 7, sharded=True)
    except FencedOff as fenced:
        assert fenced.code == 86 and fenced.fence == 2, fenced
    else:
        raise AssertionError(f"rank {rank}: a stale attempt saved")


def crash_before_commit(rank: int, location: str, mesh: Any) -> None:
    """Both ranks write step 20's shards; rank 0 dies right before it would commit them."""
    from kubetrain.checkpoint import CheckpointManager

    ckpt = CheckpointManager(location, attempt=1)
    sharded = fsdp(0, mesh)
    ckpt.save({"model": sharded.state_dict()}, 10)

    def killed(step: int, place: str, manifest: dict[str, Any]) -> Any:
        sys.stdout.flush()
        os._exit(3)  # every shard is written and hashed: only the commit is missing

    ckpt._shards_commit = killed  # type: ignore[method-assign]
    ckpt.save({"model": sharded.state_dict()}, 20)
    os._exit(4)  # rank 1: rank 0 never told it the outcome, so it cannot get here


def save_in_background(rank: int, location: str, mesh: Any) -> None:
    """FSDP2 state saved with blocking=False: staged before ``save`` returns, committed in the background
    while the loop's own collectives go on, reported only once committed. The process group made for the
    background saves is gone before the interpreter's finalisation (else gloo may abort the exit)."""
    import atexit
    import threading
    import weakref

    import torch
    import torch.distributed as dist

    from kubetrain.checkpoint import CheckpointManager

    ckpt = CheckpointManager(location, attempt=1)
    sharded = fsdp(0, mesh)
    release = threading.Event()
    real = ckpt._shards_commit

    def held(step: int, place: str, manifest: dict[str, Any]) -> Any:
        assert release.wait(60), "never released"
        return real(step, place, manifest)

    ckpt._shards_commit = held  # type: ignore[method-assign]
    groups: list[Any] = []

    def background_group_released() -> None:  # registered first, so it runs after the manager's hook
        if any(group() is not None for group in groups):
            print("the background saves' process group outlived the exit hooks", flush=True)
            os._exit(5)

    atexit.register(background_group_released)
    assert ckpt.save({"model": sharded.state_dict()}, 10, blocking=False) is None
    groups.append(weakref.ref(ckpt._checkpoint_group))
    with torch.no_grad():  # the loop goes on at once: the checkpoint must keep the state as it was
        for parameter in sharded.parameters():
            parameter.add_(1)
    dist.all_reduce(torch.ones(1))  # the loop's collectives do not wait for the background save's
    assert committed(ckpt) is None and ckpt.report()["last_checkpoint"] is None, "reported before its commit"
    dist.barrier()  # every rank has looked before rank 0 may commit
    release.set()
    saved = ckpt.wait()
    assert saved is not None and saved.step == 10 and ckpt.last_saved == saved, saved
    fresh = fsdp(1, mesh)
    state = {"model": fresh.state_dict()}
    assert CheckpointManager(location).load_latest(state_dict=state) == (state, 10)
    assert same(full(fresh.state_dict()), full(model(0).state_dict())), (
        "the checkpoint is not the staged state"
    )


def resume_when_stale(rank: int, location: str, mesh: Any) -> None:
    """A newer attempt has started: the stale attempt's collective resume stops on every rank."""
    from kubetrain.checkpoint import CheckpointManager, FencedOff

    state = {"model": fsdp(1, mesh).state_dict()}
    try:
        CheckpointManager(location, attempt=1).load_latest(state_dict=state)
    except FencedOff as fenced:
        assert fenced.code == 86 and fenced.fence == 2, fenced
    else:
        raise AssertionError(f"rank {rank}: a stale attempt resumed")
    import torch.distributed as dist

    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # not through the interpreter's teardown, which torch's threads can abort (SIGABRT)


SCENARIOS: dict[str, Callable[[int, str, Any], None]] = {
    "save_then_load": save_then_load,
    "load_then_save": load_then_save,
    "crash_before_commit": crash_before_commit,
    "save_in_background": save_in_background,
    "resume_when_stale": resume_when_stale,
}


def main() -> None:
    scenario, rank, world, port, location = sys.argv[1:6]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=rank, WORLD_SIZE=world)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", rank=int(rank), world_size=int(world), timeout=timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (int(world),))
    SCENARIOS[scenario](int(rank), location, mesh)
    dist.destroy_process_group()
    # As examples/train_fsdp.py's leave(): the exit handlers run, then the process ends at once, since
    # torch leaves gloo's threads (the device mesh keeps its groups) to the interpreter's teardown,
    # which can abort a run that passed (exit -6).
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
