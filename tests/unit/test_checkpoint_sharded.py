"""Sharded checkpoints (``kubetrain/checkpoint_sharded.py``): two real processes (gloo, CPU, FSDP2's
``fully_shard`` and DDP) write one checkpoint to a directory and to an object store, that checkpoint
resumes in another world size, a rank that dies before the commit leaves the previous checkpoint, and a
stale attempt is refused. The object store is ``SharedStore`` (local files with S3's create-only write),
because the processes must share it; the protocol itself is the one ``test_checkpoint_objects.py`` runs
on fsspec's memory store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch

from kubetrain.checkpoint import CheckpointManager, FencedOff
from kubetrain.checkpoint_sharded import (
    ShardedSaveError,
    highest_fence,
    holds_shards,
    is_sharded_save,
    own_files,
    unseen,
)
from kubetrain.devcluster.process import free_port
from tests.unit.sharded_worker import STORE, full, model, same

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["volume", "store"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "volume":
        return str(tmp_path / "ckpt")
    return f"{STORE}://{str(tmp_path).lstrip('/')}/ckpt"


def ranks(scenario: str, location: str, tmp_path: Path) -> list[tuple[int, str]]:
    """Run ``scenario`` of ``tests/unit/sharded_worker.py`` as ranks 0 and 1: (exit code, output) each."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETRAIN_")}
    env.update(OMP_NUM_THREADS="1", KUBETRAIN_TERMINATION_MESSAGE_PATH=str(tmp_path / "report"))
    worker = [sys.executable, "-m", "tests.unit.sharded_worker", scenario]
    processes = [
        subprocess.Popen(
            [*worker, str(rank), "2", str(port), location],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [process.communicate(timeout=240)[0] for process in processes]
    return [(process.returncode, output) for process, output in zip(processes, outputs, strict=True)]


def files(location: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(location)
    return sorted(key.removeprefix(root.rstrip("/") + "/") for key in fs.find(root))


def test_every_rank_writes_its_shards_and_rank_0_commits_them_once_all_have(
    location: str, tmp_path: Path
) -> None:
    results = ranks("save_then_load", location, tmp_path)
    assert [code for code, _ in results] == [0, 0], results
    checkpoint = CheckpointManager(location).latest()
    assert checkpoint is not None and checkpoint.step == 10 and checkpoint.meta["world_size"] == 2
    written = {f["name"]: f for f in checkpoint.meta["files"]}
    assert set(written) == {".metadata", "__0_0.distcp", "__1_0.distcp"}, "not every rank's shard is named"
    fs, _ = fsspec.core.url_to_fs(location)
    for name, entry in written.items():  # what the manifest says is what each rank wrote
        import hashlib

        data = fs.cat_file(f"{CheckpointManager(location)._shards_place(checkpoint)}/{name}")
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
    assert not [f for f in files(location) if "step-00000020" in f], "the failed save left files"
    # saved by two ranks, resumed by one: the same tensors and step
    state = {"model": model(1).state_dict(), "epoch": 0}
    assert CheckpointManager(location).load_latest(state_dict=state) == (state, 10)
    assert state["epoch"] == 3 and same(state["model"], full(model(0).state_dict()))


# Resharding does not depend on where the shards lie: one location each keeps the tier quick.
@pytest.mark.parametrize("location", ["store"], indirect=True)
def test_one_process_s_checkpoint_resumes_in_two_and_ddp_saves_spread_over_both(
    location: str, tmp_path: Path
) -> None:
    CheckpointManager(location, attempt=1).save({"model": model(0).state_dict(), "epoch": 5}, 5, sharded=True)
    results = ranks("load_then_save", location, tmp_path)
    assert [code for code, _ in results] == [0, 0], results
    checkpoint = CheckpointManager(location).latest()
    assert checkpoint is not None and checkpoint.step == 6, "the stale attempt's save counted"
    assert {f["name"] for f in checkpoint.meta["files"]} >= {".metadata", "__0_0.distcp"}
    state = {"model": model(3).state_dict(), "epoch": 0}
    assert CheckpointManager(location).load(checkpoint, state_dict=state) is state
    assert state["epoch"] == 6 and same(state["model"], full(model(2).state_dict()))
    assert not [f for f in files(location) if "step-00000007" in f], "the fenced-off attempt wrote"


def test_a_rank_killed_before_the_commit_leaves_the_previous_checkpoint_and_retention_removes_its_shards(
    location: str, tmp_path: Path
) -> None:
    [(code0, out0), (code1, out1)] = ranks("crash_before_commit", location, tmp_path)
    assert code0 == 3 and code1 not in (0, 4), (out0, out1)
    latest = CheckpointManager(location).latest()
    assert latest is not None and latest.step == 10, "an uncommitted checkpoint was trusted"
    garbage = [f for f in files(location) if "step-00000020" in f]
    assert any(f.endswith("__1_0.distcp") for f in garbage), garbage  # rank 1's shard was written
    CheckpointManager(location, attempt=2).save(b"next", 30)
    assert not [f for f in files(location) if "step-00000020" in f], "retention left the shards"
    assert CheckpointManager(location, attempt=2).load_latest() == (b"next", 30)


@pytest.mark.parametrize("location", ["volume"], indirect=True)  # ranks agree on the fence either way
def test_a_stale_attempt_s_resume_is_refused_on_every_rank(location: str, tmp_path: Path) -> None:
    """Rank 0 alone used to find the newer attempt (when it recorded its own) and stop, while rank 1
    waited for its choice of checkpoint until the process group broke: an exit 1, not 86."""
    CheckpointManager(location, attempt=1).save({"model": model(0).state_dict()}, 5, sharded=True)
    CheckpointManager(location, attempt=2).start()
    results = ranks("resume_when_stale", location, tmp_path)
    assert [code for code, _ in results] == [0, 0], results


def test_a_stale_attempt_s_sharded_commit_is_refused(location: str) -> None:
    old = CheckpointManager(location, attempt=1)
    old.save({"w": torch.ones(2)}, 10, sharded=True)
    real = old._shards_digest

    def newer_attempt_starts(place: str, name: str) -> dict[str, Any]:
        CheckpointManager(location, attempt=2).start()  # while the shards are being written
        return real(place, name)

    old._shards_digest = newer_attempt_starts  # type: ignore[method-assign]
    with pytest.raises(FencedOff) as fenced:
        old.save({"w": torch.zeros(2)}, 20, sharded=True)
    assert fenced.value.code == 86 and old.last_saved is not None and old.last_saved.step == 10
    new = CheckpointManager(location, attempt=2)
    latest = new.latest()
    assert latest is not None and latest.step == 10
    state = {"w": torch.empty(2)}
    assert new.load_latest(state_dict=state) == (state, 10) and torch.equal(state["w"], torch.ones(2))


def test_rank_0_does_not_commit_shards_it_cannot_see(location: str) -> None:
    # as on a volume that is not shared: another rank's shards went to a disk rank 0 does not see
    ckpt = CheckpointManager(location)
    ckpt.save({"w": torch.ones(2)}, 10, sharded=True)
    real = ckpt._shards_digest
    fs, _ = fsspec.core.url_to_fs(location)

    def written_elsewhere(place: str, name: str) -> dict[str, Any]:
        entry = real(place, name)
        if name.endswith(".distcp"):
            fs.rm_file(f"{place}/{name}")
        return entry

    ckpt._shards_digest = written_elsewhere  # type: ignore[method-assign]
    with pytest.raises(ShardedSaveError, match=r"does not see __0_0\.distcp"):
        ckpt.save({"w": torch.zeros(2)}, 20, sharded=True)
    assert [c.step for c in CheckpointManager(location).checkpoints()] == [10]
    assert not [f for f in files(location) if "step-00000020" in f], "the refused save left files"


def test_a_sharded_checkpoint_loads_only_into_a_state_dict_and_only_unchanged(location: str) -> None:
    ckpt = CheckpointManager(location)
    saved = ckpt.save({"w": torch.arange(4.0)}, 1, sharded=True)
    assert saved is not None and saved.meta["format"] == "dcp"
    with pytest.raises(ValueError, match="state_dict="):
        ckpt.load(saved)
    fs, _ = fsspec.core.url_to_fs(location)
    shard = f"{ckpt._shards_place(saved)}/__0_0.distcp"
    data = fs.cat_file(shard)
    fs.pipe_file(shard, bytes(len(data)))  # same size, other bytes
    with pytest.raises(ValueError, match="checksum"):
        ckpt.load(saved, state_dict={"w": torch.empty(4)})


def test_a_plain_state_outside_a_process_group_is_saved_by_rank_0_as_one_file(location: str) -> None:
    saved = CheckpointManager(location).save({"w": torch.ones(2)}, 1)
    assert saved is not None and saved.meta["format"] == "pt"
    assert json.dumps(saved.meta)  # a plain manifest


def test_when_a_save_is_sharded() -> None:
    class DTensor:  # stands for torch.distributed.tensor.DTensor, which is matched by name and module
        pass

    DTensor.__module__ = "torch.distributed.tensor._api"
    assert holds_shards({"model": {"w": DTensor()}}) and holds_shards([1, (DTensor(),)])
    assert not holds_shards({"model": {"w": torch.ones(1)}, "step": 3})
    assert is_sharded_save(None, {"w": DTensor()}, distributed=True)
    assert not is_sharded_save(None, {"w": DTensor()}, distributed=False)
    assert not is_sharded_save(None, {"w": torch.ones(1)}, distributed=True), "plain DDP state: rank 0"
    assert is_sharded_save(True, {"w": torch.ones(1)}, distributed=False)
    assert not is_sharded_save(False, {"w": DTensor()}, distributed=True)


def test_each_rank_hashes_the_files_it_wrote_and_the_highest_fence_wins() -> None:
    names = [".metadata", "__1_0.distcp", "__0_0.distcp", "__0_1.distcp", "__12_0.distcp"]
    assert own_files(names, 0) == [".metadata", "__0_0.distcp", "__0_1.distcp"]
    assert own_files(names, 1) == ["__1_0.distcp"] and own_files(names, 12) == ["__12_0.distcp"]
    assert highest_fence([None, 2, 3, None]) == 3 and highest_fence([None, None]) is None
    written = [{"name": "a", "size": 3}, {"name": "b", "size": 4}]
    assert unseen(written, {"a": 3, "b": 4, "c": 1}) == [] and unseen(written, {"a": 3, "b": 2}) == ["b"]


def test_the_documented_sharded_loop_saves_then_a_rerun_resumes(tmp_path: Path) -> None:
    # docs/checkpoints.md's sharded loop, in one process (no process group), run twice as a pod would be
    from tests.docs_commands import python_blocks

    _, loop, *_trainers = python_blocks("docs/checkpoints.md")
    prelude = "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)\n"
    prelude += "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nsteps = 300\n"
    script = tmp_path / "train.py"
    script.write_text(prelude + loop + "\nprint('started at', start, state['step'])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETRAIN_")}
    env.update(KUBETRAIN_CHECKPOINT_DIR=str(tmp_path / "ckpt"), OMP_NUM_THREADS="1")
    for expected in ("started at 0 0", "started at 300 300"):
        run = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, check=False
        )
        assert run.returncode == 0 and expected in run.stdout, run.stdout + run.stderr[-2000:]
    latest = CheckpointManager(tmp_path / "ckpt").latest()
    assert latest is not None and latest.step == 300 and latest.meta["format"] == "dcp"


def test_a_background_sharded_save_is_staged_before_save_returns_and_reported_once_committed(
    tmp_path: Path,
) -> None:
    location = f"{STORE}://{str(tmp_path).lstrip('/')}/ckpt"
    results = ranks("save_in_background", location, tmp_path)
    assert [code for code, _ in results] == [0, 0], results
    checkpoint = CheckpointManager(location).latest()
    assert checkpoint is not None and checkpoint.step == 10 and checkpoint.meta["world_size"] == 2
