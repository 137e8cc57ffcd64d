"""Finding the newest complete checkpoint of the common trainers in a location (kubetrain.layouts)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch

from kubetrain import layouts
from kubetrain.layouts import DCP, HF, KUBETRAIN, LIGHTNING, Entry, detect, identify

pytestmark = pytest.mark.unit


def lightning_bytes(global_step: int) -> bytes:
    """What Lightning writes: torch.save of a dict naming the step beside the weights."""
    buffer = io.BytesIO()
    torch.save({"epoch": 0, "global_step": global_step, "state_dict": {"w": torch.ones(3)}}, buffer)
    return buffer.getvalue()


def hf_checkpoint(root: Path, name: str, global_step: int | None, *, state: bool = True) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(b"weights")
    if state:
        (directory / "trainer_state.json").write_text(json.dumps({"global_step": global_step}))
    return directory


def test_hf_the_highest_global_step_wins_and_an_unfinished_save_is_skipped(tmp_path: Path) -> None:
    hf_checkpoint(tmp_path, "checkpoint-10", 10)
    hf_checkpoint(tmp_path, "checkpoint-20", 20)
    hf_checkpoint(tmp_path, "checkpoint-30", None, state=False)  # trainer_state.json not written yet
    jit = hf_checkpoint(tmp_path, "checkpoint-40", 40)
    (jit / layouts.HF_INCOMPLETE).write_text("in progress")  # the Trainer's SIGTERM save, cut off
    hf_checkpoint(tmp_path, "tmp-checkpoint-50", 50)
    found = detect(str(tmp_path))
    assert [(c.layout, c.step) for c in found.checkpoints] == [(HF, 10), (HF, 20)]
    assert found.newest(HF) == found.checkpoints[-1] and found.checkpoints[-1].location.endswith(
        "checkpoint-20"
    )
    assert sorted(Path(p).name for p in found.incomplete) == [
        "checkpoint-30",
        "checkpoint-40",
        "tmp-checkpoint-50",
    ]


def test_hf_the_step_comes_from_the_trainer_state_and_a_torn_one_is_incomplete(tmp_path: Path) -> None:
    hf_checkpoint(tmp_path, "checkpoint-7", 9)
    torn = hf_checkpoint(tmp_path, "checkpoint-12", 12)
    (torn / "trainer_state.json").write_text('{"global_st')
    found = detect(str(tmp_path))
    assert [c.step for c in found.checkpoints] == [9]
    assert [Path(p).name for p in found.incomplete] == ["checkpoint-12"]


def test_lightning_the_step_is_read_from_the_file_without_loading_it(tmp_path: Path) -> None:
    (tmp_path / "epoch=0-step=4.ckpt").write_bytes(lightning_bytes(4))
    (tmp_path / "last.ckpt").write_bytes(lightning_bytes(6))  # no step in the name
    (tmp_path / "epoch=0-step=8.ckpt.tmp").write_bytes(lightning_bytes(8)[:100])  # a save under way
    (tmp_path / "epoch=0-step=10.ckpt").write_bytes(lightning_bytes(10)[:-200])  # cut off: no zip index
    (tmp_path / "epoch=0-step=12.ckpt").write_bytes(b"")
    found = detect(str(tmp_path))
    assert [(c.layout, Path(c.location).name, c.step) for c in found.checkpoints] == [
        (LIGHTNING, "epoch=0-step=4.ckpt", 4),
        (LIGHTNING, "last.ckpt", 6),
    ]
    assert sorted(Path(p).name for p in found.incomplete) == [
        "epoch=0-step=10.ckpt",
        "epoch=0-step=12.ckpt",
        "epoch=0-step=8.ckpt.tmp",
    ]


def test_the_pickle_walk_finds_the_step_and_runs_nothing() -> None:
    import pickle

    class Boom:
        def __reduce__(self) -> Any:
            return (exec, ("raise SystemExit('ran')",))

    assert layouts.step_of_pickle(pickle.dumps({"boom": Boom(), "global_step": 123456789})) == 123456789
    assert layouts.step_of_pickle(pickle.dumps({"epoch": 1})) is None
    assert layouts.step_of_pickle(b"\x80\x04garbage") is None


def test_dcp_needs_its_metadata_and_takes_the_step_from_its_name(tmp_path: Path) -> None:
    for name, files in {
        "step-100": [".metadata", "__0_0.distcp"],  # torchtitan's
        "global_step_200": ["__0_0.distcp"],  # no .metadata: the save did not finish
    }.items():
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_bytes(b"x")
    found = detect(str(tmp_path))
    assert [(c.layout, c.step) for c in found.checkpoints] == [(DCP, 100)]
    assert [Path(p).name for p in found.incomplete] == ["global_step_200"]


def test_kubetrain_own_checkpoints_are_recognised_and_its_bookkeeping_ignored(tmp_path: Path) -> None:
    for name in ("step-5", "step-6", ".fence", ".tmp-step-7-abc", ".trash-step-4-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-5" / "COMPLETE").write_text("")
    found = detect(str(tmp_path))
    assert [(c.layout, c.step) for c in found.checkpoints] == [(KUBETRAIN, 5)]
    assert [Path(p).name for p in found.incomplete] == ["step-6"]
    assert not found.unknown


def test_an_unknown_layout_is_named_and_never_taken(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "my-weights-v3").mkdir()
    (tmp_path / "my-weights-v3" / "model.pt").write_bytes(b"x")
    (tmp_path / "runs").mkdir()  # the Trainer's logs: not a checkpoint, not unknown either
    (tmp_path / "README.md").write_text("notes")
    with caplog.at_level(logging.WARNING, logger="kubetrain.layouts"):
        found = detect(str(tmp_path))
    assert found.checkpoints == [] and found.newest() is None
    assert [Path(p).name for p in found.unknown] == ["my-weights-v3"]
    assert "my-weights-v3: not a checkpoint layout kubetrain knows" in caplog.text


def test_a_missing_location_holds_nothing(tmp_path: Path) -> None:
    assert detect(str(tmp_path / "absent")) == layouts.Detection()


def test_an_object_store_location_is_read_through_fsspec() -> None:
    fs = fsspec.filesystem("memory")
    root = "/layouts-test"
    fs.pipe_file(f"{root}/checkpoint-3/trainer_state.json", json.dumps({"global_step": 3}).encode())
    fs.pipe_file(f"{root}/checkpoint-9/model.safetensors", b"w")  # incomplete
    fs.pipe_file(f"{root}/epoch=0-step=5.ckpt", lightning_bytes(5))
    fs.pipe_file(f"{root}/step-00000007/COMPLETE-a1", b"{}")  # kubetrain's commit in a store
    try:
        found = detect(f"memory://{root}")
        assert [(c.layout, c.step) for c in found.checkpoints] == [(HF, 3), (LIGHTNING, 5), (KUBETRAIN, 7)]
        assert found.newest(LIGHTNING).location == f"memory://{root}/epoch=0-step=5.ckpt"  # type: ignore[union-attr]
        assert found.incomplete == [f"memory://{root}/checkpoint-9"]
    finally:
        fs.rm(root, recursive=True)


def test_identify_decides_from_names_alone() -> None:
    assert (
        identify(Entry("checkpoint-4", True, frozenset({"trainer_state.json"}))).read
        == "checkpoint-4/trainer_state.json"
    )
    assert identify(Entry("last.ckpt", False, size=10)).step is None
    assert identify(Entry("epoch=2-step=30.ckpt", False, size=10)).step == 30
    assert identify(Entry("notes.txt", False, size=10)).kind == "other"
    assert identify(Entry(".hidden", True)).kind == "other"
