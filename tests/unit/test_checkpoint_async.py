"""Asynchronous saves (``kubetrain/checkpoint_async.py``), on a directory and on fsspec's in-memory
object store: the caller waits only for the staging copy, one save is in flight at a time, a checkpoint
is reported only once committed, a background error is raised in the training thread, termination
waits for the save in flight, and a stale attempt's background commit is refused. Each test orders
events with ``threading.Event``s; none depends on how long anything takes."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch

from kubetrain.checkpoint import EXIT_TERMINATED, Checkpoint, CheckpointManager, FencedOff
from kubetrain.checkpoint_async import BackgroundSave

PATIENCE = 30.0  # an upper bound for an event that must come; reached only when a test fails


@pytest.fixture(params=["volume", "store"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "volume":
        yield str(tmp_path / "ckpt")
        return
    url = f"memory://async-{uuid.uuid4().hex[:8]}/job"
    yield url
    with contextlib.suppress(FileNotFoundError):  # nothing was written
        fsspec.filesystem("memory").rm(url.removeprefix("memory://").split("/")[0], recursive=True)


def committed(ckpt: CheckpointManager) -> Checkpoint | None:
    """What the manager reports as its last checkpoint (read through a call, as the report does)."""
    return ckpt.last_saved


class Recorder:
    """Wraps a manager's write-and-commit (``_save_payload``): records when each step starts being
    written and is committed, and can hold a step's write until the test lets it go."""

    def __init__(self, ckpt: CheckpointManager) -> None:
        self.events: list[str] = []
        self.held: dict[int, threading.Event] = {}
        self.writing: dict[int, threading.Event] = {}
        self.before: dict[int, Callable[[], None]] = {}
        real = ckpt._save_payload

        def recorded(step: int, fmt: str, payload: bytes, metrics: dict[str, Any] | None) -> Checkpoint:
            self.events.append(f"write {step}")
            self.writing.setdefault(step, threading.Event()).set()
            if step in self.held:
                assert self.held[step].wait(PATIENCE), "the test never let the write go"
            if step in self.before:
                self.before[step]()
            checkpoint = real(step, fmt, payload, metrics)
            self.events.append(f"commit {step}")
            return checkpoint

        ckpt._save_payload = recorded  # type: ignore[method-assign]

    def hold(self, step: int) -> threading.Event:
        self.held[step] = threading.Event()
        return self.held[step]


def test_the_loop_waits_only_for_the_staging_copy_and_the_step_is_reported_once_committed(
    location: str,
) -> None:
    ckpt = CheckpointManager(location, rank=0)
    recorder = Recorder(ckpt)
    release = recorder.hold(10)
    weights = torch.ones(3)
    assert ckpt.save({"w": weights}, 10, metrics={"loss": 1.0}, blocking=False) is None
    assert recorder.writing.setdefault(10, threading.Event()).wait(PATIENCE)
    # save returned while the write is held: the loop goes on, and may change the model meanwhile
    weights.add_(1)
    assert committed(ckpt) is None and ckpt.report()["last_checkpoint"] is None, "reported before its commit"
    assert CheckpointManager(location).latest() is None
    release.set()
    saved = ckpt.wait()
    assert saved is not None and saved.step == 10 and recorder.events == ["write 10", "commit 10"]
    assert ckpt.last_saved == saved and ckpt.report()["last_checkpoint"] == saved.location
    resumed = CheckpointManager(location).load_latest()
    assert resumed is not None and resumed[1] == 10
    assert torch.equal(resumed[0]["w"], torch.ones(3)), "the checkpoint is not the staged copy"
    assert ckpt.wait() is None  # nothing in flight any more


def test_at_most_one_save_is_in_flight_and_they_commit_in_order(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = CheckpointManager(location, rank=0)
    recorder = Recorder(ckpt)
    release = recorder.hold(10)
    waiting = threading.Event()
    real_wait = BackgroundSave.wait

    def wait(self: BackgroundSave, timeout: float | None = None) -> Checkpoint | None:
        recorder.events.append(f"next save waits for {self.step}")
        waiting.set()
        return real_wait(self, timeout)

    monkeypatch.setattr(BackgroundSave, "wait", wait)
    real_serialise = ckpt._serialise

    def serialise(state: Any) -> tuple[str, bytes]:
        recorder.events.append(f"stage {state['step']}")
        return real_serialise(state)

    ckpt._serialise = serialise  # type: ignore[method-assign]
    ckpt.save({"step": 10}, 10, blocking=False)
    assert recorder.writing.setdefault(10, threading.Event()).wait(PATIENCE)
    second = threading.Thread(target=ckpt.save, args=({"step": 20}, 20), kwargs={"blocking": False})
    second.start()
    assert waiting.wait(PATIENCE)
    release.set()
    second.join(PATIENCE)
    assert ckpt.wait() is not None
    assert [e for e in recorder.events if e != "next save waits for 20"] == [
        "stage 10",
        "write 10",
        "next save waits for 10",
        "commit 10",
        "stage 20",
        "write 20",
        "commit 20",
    ], "the second save was staged or written before the first committed"
    assert [c.step for c in CheckpointManager(location).checkpoints()] == [10, 20]


def test_an_error_of_a_background_save_is_raised_by_the_next_save_and_wait(location: str) -> None:
    ckpt = CheckpointManager(location, rank=0)
    recorder = Recorder(ckpt)
    recorder.before[10] = lambda: (_ for _ in ()).throw(OSError("disk full"))
    ckpt.save(b"ten", 10, blocking=False)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(b"twenty", 20, blocking=False)
    assert committed(ckpt) is None
    recorder.before[30] = lambda: (_ for _ in ()).throw(OSError("store unreachable"))
    ckpt.save(b"thirty", 30, blocking=False)
    with pytest.raises(OSError, match="store unreachable"):
        ckpt.wait()
    assert ckpt.wait() is None, "an error was raised twice"
    assert CheckpointManager(location).latest() is None


def test_an_error_of_a_background_save_left_at_exit_goes_into_the_report(
    location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "termination-log"
    monkeypatch.setenv("KUBETRAIN_TERMINATION_MESSAGE_PATH", str(report))
    ckpt = CheckpointManager(location, rank=0)
    recorder = Recorder(ckpt)
    recorder.before[10] = lambda: (_ for _ in ()).throw(OSError("disk full"))
    ckpt.save(b"ten", 10, blocking=False)
    ckpt._surface_at_exit()  # what atexit runs
    assert "background save failed: OSError: disk full" in capsys.readouterr().err
    ckpt.write_report(status="failed" if ckpt.error else "exited")
    written = json.loads(report.read_text())
    assert (
        written["status"] == "failed"
        and "disk full" in written["error"]
        and written["last_checkpoint"] is None
    )


@pytest.mark.parametrize("stop_at", [10, 11])
def test_termination_waits_for_the_save_in_flight_then_saves_its_own(
    location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: int
) -> None:
    monkeypatch.setenv("KUBETRAIN_TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    ckpt = CheckpointManager(location, rank=0)
    recorder = Recorder(ckpt)
    release = recorder.hold(10)
    monkeypatch.setattr(ckpt, "install_report_on_exit", lambda: None)  # no handlers in the test process
    ckpt.save_on_termination(lambda: {"step": stop_at})
    ckpt.save({"step": 10}, 10, blocking=False)
    ckpt.termination_requested = True
    outcome: list[SystemExit] = []

    def stop() -> None:
        try:
            ckpt.end_of_step(stop_at)
        except SystemExit as exited:
            outcome.append(exited)

    stopping = threading.Thread(target=stop)
    stopping.start()
    assert recorder.writing.setdefault(10, threading.Event()).wait(PATIENCE)
    release.set()
    stopping.join(PATIENCE)
    assert [e.code for e in outcome] == [EXIT_TERMINATED]
    expected = ["write 10", "commit 10"] + (
        [] if stop_at == 10 else [f"write {stop_at}", f"commit {stop_at}"]
    )
    assert recorder.events == expected, "termination did not wait, or saved a committed step again"
    report = json.loads((tmp_path / "termination-log").read_text())
    assert report["status"] == "preempted" and report["last_checkpoint"].endswith(f"step-{stop_at:08d}")


def test_a_stale_attempt_s_background_commit_is_refused(location: str) -> None:
    old = CheckpointManager(location, rank=0, attempt=1)
    recorder = Recorder(old)
    recorder.before[10] = lambda: CheckpointManager(location, rank=0, attempt=2).start()
    old.save(b"stale", 10, blocking=False)
    with pytest.raises(FencedOff) as fenced:
        old.wait()
    assert fenced.value.code == 86 and committed(old) is None
    assert CheckpointManager(location, rank=0, attempt=2).latest() is None


def test_a_sharded_save_in_the_background_is_staged_at_once_and_reported_once_committed(
    location: str,
) -> None:
    ckpt = CheckpointManager(location, rank=0)
    release = threading.Event()
    real = ckpt._shards_commit

    def held(step: int, place: str, manifest: dict[str, Any]) -> Checkpoint:
        assert release.wait(PATIENCE)
        return real(step, place, manifest)

    ckpt._shards_commit = held  # type: ignore[method-assign]
    weights = torch.ones(3)
    assert ckpt.save({"w": weights}, 10, sharded=True, blocking=False) is None
    weights.add_(1)
    assert committed(ckpt) is None
    release.set()
    saved = ckpt.wait()
    assert saved is not None and saved.meta["format"] == "dcp" and ckpt.last_saved == saved
    state = {"w": torch.empty(3)}
    assert CheckpointManager(location).load_latest(state_dict=state) == (state, 10)
    assert torch.equal(state["w"], torch.ones(3)), "the checkpoint is not the staged copy"
