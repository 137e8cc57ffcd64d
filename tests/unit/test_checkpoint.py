"""Checkpoints: a crash anywhere in a save never leaves a loadable-looking broken checkpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubetrain import checkpoint
from kubetrain.checkpoint import CheckpointManager
from tests.docs_commands import python_blocks


def test_save_then_load_latest_round_trips_bytes(tmp_path: Path) -> None:
    ckpt = CheckpointManager(tmp_path, rank=0)
    ckpt.save(b"one", 1)
    ckpt.save(b"two", 2, metrics={"loss": 0.5})
    state, step = ckpt.load_latest()  # type: ignore[misc]
    assert (state, step) == (b"two", 2)
    assert ckpt.latest().metrics == {"loss": 0.5}  # type: ignore[union-attr]


def test_plain_objects_round_trip(tmp_path: Path) -> None:
    ckpt = CheckpointManager(tmp_path, rank=0)
    ckpt.save({"weights": [1.0, 2.0], "epoch": 3}, 7)
    assert ckpt.load_latest() == ({"weights": [1.0, 2.0], "epoch": 3}, 7)


def test_retention_keeps_the_last_k(tmp_path: Path) -> None:
    ckpt = CheckpointManager(tmp_path, keep=2, rank=0)
    for step in range(5):
        ckpt.save(b"x", step)
    assert [c.step for c in ckpt.checkpoints()] == [3, 4]


def test_non_zero_ranks_never_write(tmp_path: Path) -> None:
    ckpt = CheckpointManager(tmp_path, rank=1)
    assert ckpt.save(b"x", 1) is None
    assert list(tmp_path.iterdir()) == []
    assert ckpt.write_report() is None


def test_rank_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    assert not CheckpointManager(tmp_path).is_writer


@pytest.mark.parametrize("crash_at", range(5))  # three file writes, two directory syncs
def test_a_crash_at_any_point_of_a_save_keeps_the_previous_checkpoint(
    tmp_path: Path, crash_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = CheckpointManager(tmp_path, rank=0)
    ckpt.save(b"good", 1)
    calls = {"n": 0}
    real_write, real_fsync = checkpoint._write, checkpoint._fsync_dir

    def crashing(fn: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            if calls["n"] == crash_at:
                raise OSError("disk vanished")
            calls["n"] += 1
            return fn(*args)

        return wrapper

    monkeypatch.setattr(checkpoint, "_write", crashing(real_write))
    monkeypatch.setattr(checkpoint, "_fsync_dir", crashing(real_fsync))
    with pytest.raises(OSError, match="disk vanished"):
        ckpt.save(b"new", 2)
    # Before the rename the old checkpoint is the latest; after it (a crash while syncing the
    # directory) the new one is complete. Either way the latest one loads.
    fresh = CheckpointManager(tmp_path, rank=0)
    assert fresh.load_latest() in ((b"good", 1), (b"new", 2))
    assert not list(tmp_path.glob(".tmp-*")), "a failed save cleans up after itself"


def test_a_directory_without_its_marker_is_ignored(tmp_path: Path) -> None:
    ckpt = CheckpointManager(tmp_path, rank=0)
    ckpt.save(b"good", 1)
    torn = tmp_path / "step-00000002"
    torn.mkdir()
    (torn / "state.bin").write_bytes(b"half")
    assert ckpt.latest().step == 1  # type: ignore[union-attr]


KILLER = """
import os, sys
from kubetrain.checkpoint import CheckpointManager
ckpt = CheckpointManager(sys.argv[1], keep=3, rank=0)
for step in range(1, 10_000):
    ckpt.save(os.urandom(200_000), step)
    print(step, flush=True)
"""


def test_a_process_killed_mid_save_leaves_a_loadable_latest(tmp_path: Path) -> None:
    for _ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLER, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        for _ in range(20):
            proc.stdout.readline()
        proc.kill()
        proc.wait()
        ckpt = CheckpointManager(tmp_path, rank=0)
        latest = ckpt.latest()
        assert latest is not None
        state, _ = ckpt.load_latest()  # type: ignore[misc]
        assert len(state) == 200_000


def test_resume_prefers_the_newer_of_the_hint_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = CheckpointManager(tmp_path / "old", rank=0)
    hinted = elsewhere.save(b"hint", 50)
    local = CheckpointManager(tmp_path / "new", rank=0)
    local.save(b"local", 10)
    monkeypatch.setenv("KUBETRAIN_RESUME_FROM", str(hinted.path))  # type: ignore[union-attr]
    assert local.load_latest() == (b"hint", 50)
    local.save(b"later", 60)
    assert local.load_latest() == (b"later", 60)


def test_the_report_goes_to_the_termination_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setenv("KUBETRAIN_TERMINATION_MESSAGE_PATH", str(log))
    monkeypatch.setenv("KUBETRAIN_ATTEMPT", "2")
    ckpt = CheckpointManager(tmp_path / "ckpt", rank=0)
    saved = ckpt.save(b"x", 40, metrics={"loss": 0.1})
    ckpt.write_report(metrics={"accuracy": 0.97})
    report = json.loads(log.read_text())
    assert report == {
        "status": "completed",
        "step": 40,
        "last_checkpoint": str(saved.path),  # type: ignore[union-attr]
        "metrics": {"loss": 0.1, "accuracy": 0.97},
        "attempt": "2",
    }


def test_the_report_fits_the_termination_message_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setenv("KUBETRAIN_TERMINATION_MESSAGE_PATH", str(log))
    ckpt = CheckpointManager(tmp_path / "ckpt", rank=0)
    ckpt.write_report(metrics={f"metric_{i}": "x" * 100 for i in range(100)})
    assert len(log.read_bytes()) <= 4096


SIGTERMED = """
import os, signal, sys, time
from kubetrain.checkpoint import CheckpointManager
ckpt = CheckpointManager(sys.argv[1], rank=0)
ckpt.save(b"x", 5)
ckpt.install_report_on_exit()
print("ready", flush=True)
time.sleep(60)
"""


def test_sigterm_writes_an_interrupted_report_and_exits_143(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERMED, str(tmp_path / "ckpt")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(log)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.terminate()
    assert proc.wait(10) == 143
    report = json.loads(log.read_text())
    assert (report["status"], report["step"]) == ("interrupted", 5)


def test_no_directory_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBETRAIN_CHECKPOINT_DIR", raising=False)
    with pytest.raises(ValueError, match="KUBETRAIN_CHECKPOINT_DIR"):
        CheckpointManager()


DOCUMENTED_LOOP_PRELUDE = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps, loss, accuracy = 300, 0.5, 0.9
"""


def test_the_documented_loop_saves_then_a_rerun_resumes(tmp_path: Path) -> None:
    # docs/checkpoints.md's loop, run twice as a pod would run it twice: the second run resumes.
    (loop,) = python_blocks("docs/checkpoints.md")
    script = tmp_path / "train.py"
    script.write_text(DOCUMENTED_LOOP_PRELUDE + loop + "\nprint('started at', start)\n")
    env = {
        **os.environ,
        "KUBETRAIN_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
    }
    runs = [
        subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=False)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert "started at 0" in runs[0].stdout and "started at 300" in runs[1].stdout
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step-*")) == [
        "step-00000100",
        "step-00000200",
        "step-00000300",
    ]
    report = json.loads((tmp_path / "termination-log").read_text())
    assert report["last_checkpoint"].endswith("step-00000300") and report["metrics"]["accuracy"] == 0.9


def test_the_documented_device_setup_joins_a_process_group_on_cpus(tmp_path: Path) -> None:
    # docs/gpus.md's device and backend choice, as one rank of a one-process job on a host without GPUs.
    (setup,) = python_blocks("docs/gpus.md")
    script = tmp_path / "setup.py"
    script.write_text(setup + "\nprint(device, dist.get_backend(), dist.get_world_size())\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["cpu", "gloo", "1"]
