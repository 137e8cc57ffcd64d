"""Checkpoints: a crash anywhere in a save never leaves a loadable-looking broken checkpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kubetrain import checkpoint
from kubetrain.checkpoint import (
    EXIT_FENCED,
    EXIT_TERMINATED,
    STALE_SECONDS,
    CheckpointManager,
    Entry,
    FencedOff,
    plan_cleanup,
    read_fence,
)
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


# -- overwriting a step: a crash anywhere keeps the step ------------------------------------------
IO_STEPS = ("_write", "_fsync_dir", "_rename", "_unlink", "_rmtree")


class Crash(BaseException):
    """The process died here: nothing after this point runs, not even clean-up handlers."""


class Injector:
    """Wraps every file-system step of kubetrain.checkpoint: counts them, runs hooks, or dies at one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, crash_at: int | None = None) -> None:
        self.calls = 0
        self.crash_at = crash_at
        self.dead = False
        self.hooks: dict[int, Any] = {}
        for name in IO_STEPS:
            monkeypatch.setattr(checkpoint, name, self._wrap(getattr(checkpoint, name)))

    def _wrap(self, real: Any) -> Any:
        def step(*args: Any) -> Any:
            if self.dead or self.calls == self.crash_at:
                self.dead = True
                raise Crash(f"died before {real.__name__}{args}")
            hook = self.hooks.pop(self.calls, None)
            self.calls += 1
            if hook is not None:
                hook()
            return real(*args)

        return step


def overwrite_setup(directory: Path, attempt: int | None) -> CheckpointManager:
    ckpt = CheckpointManager(directory, rank=0, attempt=attempt, keep=5)
    ckpt.save(b"four", 4)
    ckpt.save(b"old", 5)
    return ckpt


@pytest.mark.parametrize("attempt", [None, 1])
def test_an_overwrite_crashing_at_any_point_keeps_the_step(
    tmp_path: Path, attempt: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:  # count the file-system steps of an overwrite
        counter = Injector(patched)
        ckpt = overwrite_setup(tmp_path / "count", attempt)
        setup_calls = counter.calls
        ckpt.save(b"new", 5)
        points = counter.calls - setup_calls
    assert points >= 8, "writes, syncs, the move aside, the rename into place, the clean-up"

    seen = []
    for crash_at in range(points):
        directory = tmp_path / f"crash-{crash_at}"
        ckpt = overwrite_setup(directory, attempt)
        with monkeypatch.context() as patched:
            Injector(patched, crash_at=crash_at)
            with pytest.raises(Crash):
                ckpt.save(b"new", 5)
        # The next process of this job (the same attempt restarted, or the next one) looks.
        after = CheckpointManager(directory, rank=0, attempt=attempt, keep=5)
        latest = after.latest()
        assert latest is not None and latest.step == 5, f"step 5 lost by a crash at I/O step {crash_at}"
        seen.append(after.load(latest))
        # Its next save cleans up whatever the crash left (temporary dirs: once stale).
        for leftover in directory.glob(".tmp-*"):
            os.utime(leftover, (0, 0))
        after.save(b"six", 6)
        assert not [p.name for p in directory.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
        assert after.load(next(c for c in after.checkpoints() if c.step == 5)) == seen[-1]
    assert set(seen) == {b"old", b"new"}
    first_new = seen.index(b"new")
    assert seen[first_new:] == [b"new"] * (points - first_new), "once published, the new one stays"


def test_a_crash_between_the_renames_of_an_older_version_is_recovered(tmp_path: Path) -> None:
    # What a crash between the two renames left behind (also under earlier versions): the step
    # exists only as the copy moved aside. It is found, and cleaned up once the step is saved again.
    ckpt = CheckpointManager(tmp_path, rank=0)
    ckpt.save(b"four", 4)
    ckpt.save(b"five", 5)
    (tmp_path / "step-00000005").rename(tmp_path / ".trash-step-00000005-0123abcd")
    assert ckpt.load_latest() == (b"five", 5)
    ckpt.save(b"five again", 5)
    assert ckpt.load_latest() == (b"five again", 5)
    assert not list(tmp_path.glob(".trash-*"))


# -- the fence ---------------------------------------------------------------------------------
def test_an_older_attempt_is_fenced_off_once_a_newer_one_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = CheckpointManager(tmp_path, rank=0, attempt=1)
    first.save(b"first", 10)
    second = CheckpointManager(tmp_path, rank=0, attempt=2)
    assert second.load_latest() == (b"first", 10)  # touching the directory records attempt 2
    assert read_fence(tmp_path) == 2

    with pytest.raises(FencedOff) as fenced:
        first.save(b"late", 20)
    assert (fenced.value.code, fenced.value.attempt, fenced.value.fence) == (EXIT_FENCED, 1, 2)
    assert not isinstance(fenced.value, Exception), "a broad `except Exception` must not swallow it"
    message = capsys.readouterr().err
    assert "attempt 1 is fenced off" in message and "attempt 2 has started" in message
    assert f"code {EXIT_FENCED}" in message and "step 20" in message
    assert [c.step for c in second.checkpoints()] == [10]
    assert not list(tmp_path.glob(".tmp-*"))


def test_an_attempt_older_than_the_fence_is_refused_at_its_start(tmp_path: Path) -> None:
    CheckpointManager(tmp_path, rank=0, attempt=3).start()
    with pytest.raises(FencedOff):
        CheckpointManager(tmp_path, rank=0, attempt=2).latest()
    assert read_fence(tmp_path) == 3, "the fence never moves down"
    CheckpointManager(tmp_path, rank=0, attempt=3).save(b"x", 1)  # the same attempt again: fine
    assert CheckpointManager(tmp_path, rank=1, attempt=1).latest() is not None, "other ranks only read"


def test_attempts_starting_together_leave_the_highest_as_the_fence(tmp_path: Path) -> None:
    # Each start adds a name; none replaces another, so whatever the interleaving the maximum wins.
    starters = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from kubetrain.checkpoint import CheckpointManager as M\n"
                "try: M(sys.argv[1], rank=0, attempt=int(sys.argv[2])).start()\n"
                "except SystemExit: pass",
                str(tmp_path),
                str(attempt),
            ]
        )
        for attempt in (4, 2, 5, 3, 1)
    ]
    assert [p.wait(30) for p in starters] == [0] * 5
    assert read_fence(tmp_path) == 5
    with pytest.raises(FencedOff):
        CheckpointManager(tmp_path, rank=0, attempt=4).save(b"x", 1)


def _attempts_one_and_two(directory: Path) -> tuple[CheckpointManager, CheckpointManager]:
    """Attempt 1, which saved step 5, and attempt 2, made after that save."""
    older = CheckpointManager(directory, rank=0, attempt=1)
    older.save(b"older", 5)
    return older, CheckpointManager(directory, rank=0, attempt=2)


def test_an_overwrite_never_replaces_a_newer_attempts_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Attempt 1 has not seen the fence move (the check raced with attempt 2's start); what it
    # moves aside is checked after the move, and a newer attempt's checkpoint is put back.
    older, newer = _attempts_one_and_two(tmp_path)
    newer.save(b"newer", 5)
    monkeypatch.setattr(checkpoint, "read_fence", lambda directory, lineage=None: 1)
    with pytest.raises(FencedOff) as fenced:
        older.save(b"older again", 5)
    assert fenced.value.fence == 2
    monkeypatch.undo()
    assert newer.load_latest() == (b"newer", 5)
    assert [c.attempt for c in newer.checkpoints()] == [2]


def test_a_newer_attempt_starting_mid_save_fences_the_older_one_before_it_publishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older, newer = _attempts_one_and_two(tmp_path)
    injector = Injector(monkeypatch)
    injector.hooks[injector.calls] = newer.start  # while attempt 1 writes its state file
    with pytest.raises(FencedOff):
        older.save(b"older", 6)
    monkeypatch.undo()
    assert [c.step for c in newer.checkpoints()] == [5]
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_newer_attempts_clean_up_under_an_older_save_ends_it_fenced_not_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Attempt 2 saves (and cleans up) while attempt 1 is writing: attempt 1's temporary directory
    # goes, its next write fails, and the failure is reported as what it is.
    older, newer = _attempts_one_and_two(tmp_path)
    injector = Injector(monkeypatch)
    injector.hooks[injector.calls + 1] = lambda: newer.save(b"newer", 6)  # after the state file
    with pytest.raises(FencedOff):
        older.save(b"older", 6)
    monkeypatch.undo()
    assert newer.load_latest() == (b"newer", 6)
    assert not list(tmp_path.glob(".tmp-*"))


def test_latest_is_the_newest_attempts_even_at_a_lower_step(tmp_path: Path) -> None:
    CheckpointManager(tmp_path, rank=0, attempt=1).save(b"first try", 100)
    rewound = CheckpointManager(tmp_path, rank=0, attempt=2)
    rewound.save(b"second try", 40)  # attempt 2 started over (or from an earlier checkpoint)
    assert rewound.load_latest() == (b"second try", 40)


def test_without_an_attempt_nothing_is_fenced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBETRAIN_ATTEMPT", raising=False)
    local = CheckpointManager(tmp_path / "fresh", rank=0)
    local.save(b"x", 1)
    assert not (tmp_path / "fresh" / ".fence").exists()
    CheckpointManager(tmp_path / "fenced", rank=0, attempt=7).start()
    assert CheckpointManager(tmp_path / "fenced", rank=0).save(b"y", 1) is not None


def test_the_attempt_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_ATTEMPT", "3")
    ckpt = CheckpointManager(tmp_path, rank=0)
    ckpt.save(b"x", 1)
    assert (ckpt.attempt, read_fence(tmp_path), ckpt.latest().attempt) == (3, 3, 3)  # type: ignore[union-attr]
    monkeypatch.setenv("KUBETRAIN_ATTEMPT", "third")
    with pytest.raises(ValueError, match="KUBETRAIN_ATTEMPT must be a positive integer"):
        CheckpointManager(tmp_path)


def test_a_fenced_attempt_says_so_in_its_report(tmp_path: Path) -> None:
    first = CheckpointManager(tmp_path, rank=0, attempt=1)
    first.save(b"x", 10)
    CheckpointManager(tmp_path, rank=0, attempt=2).start()
    with pytest.raises(FencedOff):
        first.save(b"x", 20)
    report = first.report(status="fenced")
    assert (report["attempt"], report["fenced_by"], report["step"]) == ("1", "2", 20)
    # (An uncaught one writes it by itself: tests/e2e/test_checkpoint_fencing.py.)


# -- retention and clean-up --------------------------------------------------------------------
def test_retention_never_deletes_a_newer_attempts_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    newer = CheckpointManager(tmp_path, rank=0, attempt=2, keep=5)
    for step in (10, 20, 30):
        newer.save(b"newer", step)
    monkeypatch.delenv("KUBETRAIN_ATTEMPT", raising=False)
    local = CheckpointManager(tmp_path, rank=0, keep=1)  # no fence, counts as attempt 1
    local.save(b"local", 40)
    assert [(c.attempt, c.step) for c in local.checkpoints()] == [(1, 40), (2, 10), (2, 20), (2, 30)]


def entry(name: str, kind: str, step: int, **fields: Any) -> Entry:
    meta: dict[str, Any] | None = None
    if "meta_attempt" in fields:
        meta = {"step": step, "attempt": fields.pop("meta_attempt")}
        if fields.get("lineage") is not None and kind != "tmp":
            meta["lineage"] = fields["lineage"]
    return Entry(Path(name), kind, step, complete=meta is not None, meta=meta, **fields)


def test_the_clean_up_plan() -> None:
    entries = [
        entry("step-1", "step", 1, meta_attempt=1, attempt=1),
        entry("step-2", "step", 2, meta_attempt=1, attempt=1),
        entry("step-3", "step", 3, meta_attempt=2, attempt=2),
        entry("step-4", "step", 4, meta_attempt=3, attempt=3),  # a newer attempt's
        entry(".trash-step-2-a", "trash", 2, meta_attempt=1, attempt=1),  # superseded
        entry(".trash-step-3-b", "trash", 3, attempt=None),  # half deleted
        entry(".trash-step-5-c", "trash", 5, meta_attempt=2, attempt=2),  # the only copy of step 5
        entry(".tmp-step-6-a1-x", "tmp", 6, attempt=1, token="x"),  # an older attempt's save
        entry(".tmp-step-6-a2-y", "tmp", 6, attempt=2, token="y"),  # this attempt's, maybe live
        entry(".tmp-step-6-a2-z", "tmp", 6, attempt=2, token="z", age=STALE_SECONDS + 1),  # dead
        entry(".tmp-step-6-a2-me", "tmp", 6, attempt=2, token="me"),  # this manager's own leftover
        entry(".tmp-step-6-a3-w", "tmp", 6, attempt=3, token="w", age=STALE_SECONDS + 1),  # newer
        entry("step-0", "step", 0),  # half deleted, older than everything kept
        entry("step-00", "step", 0, foreign=True),  # not ours: files save() never writes
    ]
    plan = plan_cleanup(entries, keep=2, attempt=2, fencing=True, own_token="me")
    assert plan.restore == [(Path(".trash-step-5-c"), Path("step-00000005"))]
    assert sorted(str(p) for p in plan.discard) == [
        ".tmp-step-6-a1-x",
        ".tmp-step-6-a2-me",
        ".tmp-step-6-a2-z",
        ".trash-step-2-a",
        ".trash-step-3-b",
        "step-0",
        "step-1",
        "step-2",
        "step-3",
    ]
    # Without fencing, an older attempt's temporary directory waits until it is stale like any other.
    unfenced = plan_cleanup(entries, keep=2, attempt=2, fencing=False, own_token="me")
    assert Path(".tmp-step-6-a1-x") not in unfenced.discard
    # Retention keeps the newest (attempt, step) and never what was just saved.
    plan = plan_cleanup(entries, keep=1, attempt=3, fencing=True, own_token="me", protect=Path("step-3"))
    assert Path("step-4") not in plan.discard and Path("step-3") not in plan.discard
    assert Path(".trash-step-5-c") in plan.discard


# -- lineages: one directory passed from one job to the next -----------------------------------
FIRST, CONTINUATION = "digits-pytorchjob-5f3a1c2e", "digits-trainjob-5f3a1c2e"


def lineage_of(directory: Path, lineage: str | None, attempt: int, keep: int = 3) -> CheckpointManager:
    return CheckpointManager(directory, rank=0, attempt=attempt, lineage=lineage, keep=keep)


def test_each_lineage_is_fenced_only_by_its_own_attempts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first_try = lineage_of(tmp_path, FIRST, 1)
    first_try.save(b"a1", 20)
    lineage_of(tmp_path, FIRST, 2).save(b"a2", 40)  # the first pipeline step was retried
    continuation = lineage_of(tmp_path, CONTINUATION, 1)
    assert continuation.load_latest() == (b"a2", 40), "a new lineage at attempt 1 is not fenced off"
    continuation.save(b"b1", 60)
    assert sorted(os.listdir(tmp_path / ".fence")) == [
        f"attempt-1@{FIRST}",
        f"attempt-1@{CONTINUATION}",
        f"attempt-2@{FIRST}",
    ]
    assert (read_fence(tmp_path, FIRST), read_fence(tmp_path, CONTINUATION)) == (2, 1)
    with pytest.raises(FencedOff) as fenced:
        first_try.save(b"late", 80)  # the first step's first attempt, still running somewhere
    assert (fenced.value.attempt, fenced.value.fence, fenced.value.lineage) == (1, 2, FIRST)
    message = capsys.readouterr().err
    assert f"attempt 1 of lineage {FIRST} is fenced off" in message
    assert f"attempt 2 of lineage {FIRST} has started" in message
    lineage_of(tmp_path, CONTINUATION, 2).start()
    with pytest.raises(FencedOff):
        continuation.save(b"late", 80)
    assert [(c.lineage, c.step) for c in CheckpointManager(tmp_path, rank=1).checkpoints()] == [
        (FIRST, 20),
        (FIRST, 40),
        (CONTINUATION, 60),
    ]


def test_a_lineages_own_checkpoints_win_whatever_the_attempts_and_steps(tmp_path: Path) -> None:
    lineage_of(tmp_path, FIRST, 1).save(b"a1", 20)
    lineage_of(tmp_path, FIRST, 2).save(b"a2", 60)
    continuation = lineage_of(tmp_path, CONTINUATION, 1)
    continuation.save(b"b1", 80)
    # By (attempt, step) across lineages, the first job's step 60 (attempt 2) would win.
    assert continuation.latest().step == 80  # type: ignore[union-attr]
    assert lineage_of(tmp_path, CONTINUATION, 2).load_latest() == (b"b1", 80), "a retry resumes from its own"
    assert lineage_of(tmp_path, FIRST, 2).load_latest() == (b"a2", 60), "the first job still sees its own"
    # Its own come first even below another lineage's highest step (it started over).
    restart = tmp_path / "restart"
    lineage_of(restart, FIRST, 2).save(b"a2", 100)
    lineage_of(restart, CONTINUATION, 1).save(b"from scratch", 10)
    assert lineage_of(restart, CONTINUATION, 1).load_latest() == (b"from scratch", 10)


def test_without_its_own_a_lineage_resumes_from_the_highest_step_of_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lineage_of(tmp_path, FIRST, 2).save(b"a2", 40)
    lineage_of(tmp_path, "other-run", 5).save(b"other", 60)
    assert lineage_of(tmp_path, CONTINUATION, 1).load_latest() == (b"other", 60)
    # The hint (the last checkpoint the previous step reported) counts the same way.
    monkeypatch.setenv("KUBETRAIN_RESUME_FROM", str(tmp_path / "step-00000040"))
    assert lineage_of(tmp_path, CONTINUATION, 1).resume_point().step == 60  # type: ignore[union-attr]
    (tmp_path / "step-00000060" / "COMPLETE").unlink()
    assert lineage_of(tmp_path, CONTINUATION, 1).load_latest() == (b"a2", 40)


def test_retention_only_deletes_the_callers_own_lineage(tmp_path: Path) -> None:
    first = lineage_of(tmp_path, FIRST, 2, keep=2)
    for step in (10, 20, 30):
        first.save(b"a", step)
    continuation = lineage_of(tmp_path, CONTINUATION, 1, keep=2)
    for step in (40, 50, 60):
        continuation.save(b"b", step)
    left = [(c.lineage, c.step) for c in continuation.checkpoints()]
    assert left == [(FIRST, 20), (FIRST, 30), (CONTINUATION, 50), (CONTINUATION, 60)]
    lineage_of(tmp_path, FIRST, 3, keep=1).save(b"a", 70)  # the first job's lineage again
    left = [(c.lineage, c.step) for c in continuation.checkpoints()]
    assert left == [(FIRST, 70), (CONTINUATION, 50), (CONTINUATION, 60)]


def test_a_continuation_saving_a_step_the_previous_lineage_holds_is_not_fenced(tmp_path: Path) -> None:
    # The holder's attempt (2) is higher, but of another lineage: no reason to stop.
    lineage_of(tmp_path, FIRST, 2).save(b"a2", 60)
    continuation = lineage_of(tmp_path, CONTINUATION, 1)
    continuation.save(b"b1", 60)
    assert continuation.load_latest() == (b"b1", 60)
    assert [(c.lineage, c.step) for c in continuation.checkpoints()] == [(CONTINUATION, 60)]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".trash-"))]


def test_leftovers_of_another_lineage_are_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lineage_of(tmp_path, FIRST, 1).save(b"a1", 10)
    crashing = lineage_of(tmp_path, CONTINUATION, 1)
    crashing.start()
    with monkeypatch.context() as patched:
        Injector(patched, crash_at=1)  # dies after writing its state file
        with pytest.raises(Crash):
            crashing.save(b"b1", 20)
    (leftover,) = tmp_path.glob(".tmp-*")
    assert leftover.name.endswith(f"@{CONTINUATION}"), "a save in progress names its lineage"
    os.utime(leftover, (0, 0))  # long untouched
    lineage_of(tmp_path, FIRST, 2).save(b"a2", 30)
    assert leftover.exists(), "another lineage's save is not this lineage's to judge"
    lineage_of(tmp_path, CONTINUATION, 2).save(b"b2", 40)
    assert not leftover.exists(), "the next attempt of its own lineage removes it"


def test_the_clean_up_plan_across_lineages() -> None:
    entries = [
        entry("step-1", "step", 1, meta_attempt=1, lineage="a", attempt=1),
        entry("step-2", "step", 2, meta_attempt=9, lineage="b", attempt=9),  # another lineage's
        entry("step-3", "step", 3, meta_attempt=1, lineage="a", attempt=1),
        entry("step-4", "step", 4, meta_attempt=1, lineage="a", attempt=1),
        entry(".trash-step-3-a", "trash", 3, meta_attempt=1, lineage="a", attempt=1),  # superseded, ours
        entry(".trash-step-3-b", "trash", 3, meta_attempt=1, lineage="b", attempt=1),  # superseded, theirs
        entry(".trash-step-5-b", "trash", 5, meta_attempt=1, lineage="b", attempt=1),  # their only copy
        entry(".trash-step-6-x", "trash", 6, attempt=None),  # half deleted: nobody's
        entry(".tmp-step-7-a1-x@a", "tmp", 7, attempt=1, lineage="a", token="x"),  # fenced off
        entry(".tmp-step-7-a1-y@b", "tmp", 7, attempt=1, lineage="b", token="y", age=STALE_SECONDS + 1),
        entry(".tmp-step-7-a1-z", "tmp", 7, attempt=1, token="z", age=STALE_SECONDS + 1),  # unlabelled
    ]
    plan = plan_cleanup(entries, keep=2, attempt=2, fencing=True, own_token="me", lineage="a")
    assert plan.restore == []
    assert sorted(str(p) for p in plan.discard) == [
        ".tmp-step-7-a1-x@a",
        ".trash-step-3-a",
        ".trash-step-6-x",
        "step-1",
    ]
    # Unlabelled is a lineage of its own: it keeps its hands off the others' checkpoints too.
    plan = plan_cleanup(entries, keep=1, attempt=2, fencing=True, own_token="me")
    assert sorted(str(p) for p in plan.discard) == [".tmp-step-7-a1-z", ".trash-step-6-x"]


def test_an_unlabelled_attempt_is_fenced_by_any_lineage(tmp_path: Path) -> None:
    # A job submitted without a lineage label and resubmitted with one (its name): the first
    # attempt is fenced off by the second, and the second resumes from the first's checkpoint.
    unlabelled = lineage_of(tmp_path, None, 1)
    unlabelled.save(b"first", 10)
    resubmitted = lineage_of(tmp_path, "train", 2)
    assert resubmitted.load_latest() == (b"first", 10)
    with pytest.raises(FencedOff) as fenced:
        unlabelled.save(b"late", 20)
    assert (fenced.value.fence, fenced.value.lineage) == (2, None)
    assert read_fence(tmp_path) == 2 and read_fence(tmp_path, "train") == 2


def test_the_lineage_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_LINEAGE", CONTINUATION)
    monkeypatch.setenv("KUBETRAIN_ATTEMPT", "1")
    ckpt = CheckpointManager(tmp_path, rank=0)
    saved = ckpt.save(b"x", 1)
    assert saved is not None and ckpt.lineage == saved.lineage == CONTINUATION
    assert read_fence(tmp_path, CONTINUATION) == 1
    monkeypatch.setenv("KUBETRAIN_LINEAGE", "")
    assert CheckpointManager(tmp_path).lineage is None
    monkeypatch.setenv("KUBETRAIN_LINEAGE", "../elsewhere")
    with pytest.raises(ValueError, match="KUBETRAIN_LINEAGE must be a Kubernetes label value"):
        CheckpointManager(tmp_path)


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


class _RunsCommand:
    """What a malicious checkpoint holds: unpickling it runs a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_a_hint_outside_the_checkpoint_directory_is_never_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``$KUBETRAIN_RESUME_FROM`` is the job's annotation: anyone who may patch the job names it. A
    complete checkpoint elsewhere whose state runs a command must be neither chosen nor loaded."""
    import torch

    ran = tmp_path / "ran"
    evil = CheckpointManager(tmp_path / "elsewhere", rank=0).save(b"x", 99)
    assert evil is not None
    (evil.path / "state.bin").unlink()
    torch.save({"model": _RunsCommand(ran)}, evil.path / "state.pt")
    meta = json.loads((evil.path / "meta.json").read_text())
    (evil.path / "meta.json").write_text(json.dumps({**meta, "format": "pt"}))
    local = CheckpointManager(tmp_path / "job", rank=0)
    local.save(b"local", 10)
    for hint in (evil.path, tmp_path / "job" / ".." / "elsewhere" / evil.path.name):
        monkeypatch.setenv("KUBETRAIN_RESUME_FROM", str(hint))
        assert local.load_latest() == (b"local", 10), "a checkpoint outside the job's directory was chosen"
        assert "ignoring $KUBETRAIN_RESUME_FROM" in capsys.readouterr().err
    (tmp_path / "job" / "step-00000200").symlink_to(evil.path)
    monkeypatch.setenv("KUBETRAIN_RESUME_FROM", str(tmp_path / "job" / "step-00000200"))
    assert local._from_env() is None, "a link out of the directory was followed"
    assert not ran.exists(), "the hinted checkpoint's code ran"


def test_a_hint_inside_the_directory_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hinted = CheckpointManager(tmp_path, rank=0).save(b"hint", 50)
    assert hinted is not None
    monkeypatch.setenv("KUBETRAIN_RESUME_FROM", str(hinted.path))
    local = CheckpointManager(tmp_path, rank=0)
    assert local._from_env() == hinted
    assert local.load_latest() == (b"hint", 50)
    local.save(b"later", 60)
    assert local.load_latest() == (b"later", 60)


def test_a_state_is_read_as_plain_data_and_fully_unpickled_only_when_it_needs_it(tmp_path: Path) -> None:
    """Loading prefers ``weights_only``: plain data never runs code; a state that needs more is
    unpickled (it is in the job's own directory, which loading trusts), unless ``weights_only=True``."""
    import collections
    import fractions
    import pickle

    import torch

    ckpt = CheckpointManager(tmp_path, rank=0)
    plain = ckpt.save({"w": torch.ones(2), "step": 3, "names": ["a"]}, 1)
    assert plain is not None
    assert ckpt.load(plain, weights_only=True)["step"] == 3
    rich = ckpt.save({"third": fractions.Fraction(1, 3)}, 2)
    assert rich is not None
    assert ckpt.load(rich)["third"] == fractions.Fraction(1, 3)
    with pytest.raises(pickle.UnpicklingError):
        ckpt.load(rich, weights_only=True)
    for state, step in (({"a": [1, 2.5, "x", b"y", (1,), {3}]}, 3), (collections.Counter("ab"), 4)):
        saved = ckpt.save(b"", step)
        assert saved is not None
        (saved.path / "state.bin").write_bytes(pickle.dumps(state))  # as saved where torch is missing
        (saved.path / "state.bin").rename(saved.path / "state.pkl")
        meta = json.loads((saved.path / "meta.json").read_text())
        (saved.path / "meta.json").write_text(json.dumps({**meta, "format": "pkl"}))
        saved = ckpt.latest()
        assert saved is not None and saved.meta["format"] == "pkl"
        assert ckpt.load(saved) == state
        if isinstance(state, collections.Counter):
            with pytest.raises(pickle.UnpicklingError, match="not plain data"):
                ckpt.load(saved, weights_only=True)
        else:
            assert ckpt.load(saved, weights_only=True) == state


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
    code, report, _ = _terminated(tmp_path, SIGTERMED)
    assert code == 143
    assert (report["status"], report["step"]) == ("interrupted", 5)


REPORTED_THEN_SIGTERMED = """
import sys, time
from kubetrain.checkpoint import CheckpointManager
ckpt = CheckpointManager(sys.argv[1], rank=0)
ckpt.install_report_on_exit()
ckpt.save(b"x", 5)
ckpt.write_report(metrics={"accuracy": 0.5})
print("ready", flush=True)
time.sleep(60)  # e.g. waiting for the other ranks, when the pod is deleted
"""


def test_sigterm_after_the_final_report_leaves_it(tmp_path: Path) -> None:
    """A process that has reported (completed, or fenced off) and is stopped on its way out (its pod
    deleted as its job failed) keeps what it reported, not ``interrupted``."""
    code, report, _ = _terminated(tmp_path, REPORTED_THEN_SIGTERMED)
    assert code == 143
    assert (report["status"], report["step"], report["metrics"]) == ("completed", 5, {"accuracy": 0.5})


DIES = """
import sys
from kubetrain.checkpoint import CheckpointManager
ckpt = CheckpointManager(sys.argv[1], rank=0)
ckpt.install_report_on_exit()
ckpt.save(b"x", 7)
{}["labels"]
"""


def test_the_exception_a_script_dies_of_is_in_its_report(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    done = subprocess.run(
        [sys.executable, "-c", DIES, str(tmp_path / "ckpt")],
        env={**os.environ, "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(log)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "KeyError: 'labels'" in done.stderr  # the traceback is still printed
    report = json.loads(log.read_text())
    assert (report["status"], report["step"], report["error"]) == ("failed", 7, "KeyError: 'labels'")
    assert report["traceback"].startswith("Traceback (most recent call last):")
    assert report["traceback"].endswith("KeyError: 'labels'")


STOPS_AT_STEP_END = """
import sys, time
from kubetrain.checkpoint import CheckpointManager
ckpt = CheckpointManager(sys.argv[1], rank=0)
model = {"weights": 0}
ckpt.save_on_termination(lambda: dict(model), wait=float(sys.argv[2]))
print("ready", flush=True)
for step in range(1, 10_000):
    model["weights"] = step
    time.sleep(0.01)
    if sys.argv[3] == "cooperates":
        ckpt.end_of_step(step)
"""


def _terminated(
    tmp_path: Path, script: str, *args: str, settle: float = 0.0, timeout: float = 10
) -> tuple[int, dict[str, Any], float]:
    """Run ``script`` (its checkpoint directory first, then ``args``) until it prints ``ready``, wait
    ``settle`` seconds, SIGTERM it and give it ``timeout`` seconds to end: its exit code, its
    termination report, and how long it took to end."""
    log = tmp_path / "termination-log"
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "ckpt"), *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(log)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(settle)
    started = time.monotonic()
    proc.terminate()
    code = proc.wait(timeout)
    return code, json.loads(log.read_text()), time.monotonic() - started


def _stopped_at_step_end(
    tmp_path: Path, *, wait: float, cooperates: bool
) -> tuple[int, dict[str, Any], float]:
    return _terminated(
        tmp_path,
        STOPS_AT_STEP_END,
        str(wait),
        "cooperates" if cooperates else "not",
        settle=0.3,
        timeout=30,
    )


def test_after_save_on_termination_sigterm_saves_the_step_it_stops_at(tmp_path: Path) -> None:
    code, report, _ = _stopped_at_step_end(tmp_path, wait=20, cooperates=True)
    assert code == EXIT_TERMINATED == 143
    assert report["status"] == "preempted" and report["step"] > 1
    ckpt = CheckpointManager(tmp_path / "ckpt", rank=0)
    latest = ckpt.latest()
    assert latest is not None and latest.step == report["step"]
    assert ckpt.load(latest) == {"weights": report["step"]}  # the state at the end of that very step


def test_a_loop_that_never_reaches_end_of_step_exits_after_the_wait_without_saving(tmp_path: Path) -> None:
    code, report, took = _stopped_at_step_end(tmp_path, wait=1, cooperates=False)
    assert code == 143 and report["status"] == "interrupted"
    assert took >= 0.9
    assert CheckpointManager(tmp_path / "ckpt", rank=0).latest() is None


def test_end_of_step_does_nothing_until_asked_and_a_given_stop_overrides(tmp_path: Path) -> None:
    ckpt = CheckpointManager(tmp_path, rank=1)  # not rank 0: stops without writing
    ckpt.save_on_termination(lambda: b"state")
    ckpt.end_of_step(3)
    with pytest.raises(SystemExit) as stopped:
        ckpt.end_of_step(4, stop=True)  # another rank was asked: every rank stops at this step
    assert stopped.value.code == EXIT_TERMINATED and ckpt.latest() is None
    with pytest.raises(ValueError, match="wait"):
        ckpt.save_on_termination(lambda: b"", wait=0)


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
    # the sharded one: test_checkpoint_sharded.py; the trainers' lines: test_integrations_imports.py
    loop, _sharded, *_trainers = python_blocks("docs/checkpoints.md")
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
