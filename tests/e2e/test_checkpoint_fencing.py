"""Two real processes on one checkpoint directory: an attempt that outlives its job never writes over the next.

Each process is a tiny training loop using kubetrain.checkpoint, as a pod of one attempt would run
it (``KUBETRAIN_ATTEMPT`` set, the report going to its termination message). Attempt 1 keeps
running while attempt 2 starts on the same directory, as a pod on a partitioned node would. The
pipeline case adds a second lineage (``KUBETRAIN_LINEAGE``): a job continuing the first one's
checkpoints in the same directory. No cluster is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain.checkpoint import EXIT_FENCED, CheckpointManager
from tests.conftest import REPO

# One number for a model, nudged by 1 a step, so a checkpoint's weight equals its step exactly when
# the training that led to it never mixed two attempts' states.
TRAINER = """
import json, sys
from kubetrain.checkpoint import CheckpointManager

directory, steps, paced = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "paced"
ckpt = CheckpointManager(directory, keep=3)
ckpt.install_report_on_exit()
resumed = ckpt.load_latest()
state, start = (json.loads(resumed[0]), resumed[1]) if resumed else ({"weight": 0}, 0)
print("resumed", start, flush=True)
for step in range(start + 1, start + steps + 1):
    if paced:
        sys.stdin.readline()
    state = {"weight": state["weight"] + 1, "attempt": ckpt.attempt, "step": step}
    ckpt.save(json.dumps(state).encode(), step)
    for saved in ckpt.checkpoints():
        if start < saved.step <= step and saved.lineage == ckpt.lineage and saved.attempt < ckpt.attempt:
            sys.exit(f"an older attempt replaced step {saved.step}")
    print("saved", step, flush=True)
ckpt.write_report()
"""


class Trainer:
    """One attempt's rank 0, its stdout read line by line without blocking the test forever."""

    def __init__(
        self,
        directory: Path,
        *,
        attempt: int,
        steps: int,
        paced: bool,
        command: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
        name: str = "",
        lineage: str = "",
    ) -> None:
        self.log = directory.parent / f"termination-log-{name or f'{lineage}{attempt}'}"
        env = {
            **os.environ,
            "RANK": "0",
            **(extra_env or {}),
            "KUBETRAIN_CHECKPOINT_DIR": str(directory),
            "KUBETRAIN_ATTEMPT": str(attempt),
            "KUBETRAIN_LINEAGE": lineage,
            "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(self.log),
        }
        args = command or ["-c", TRAINER, str(directory), str(steps), "paced" if paced else "free"]
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("")  # end of output

    def expect_line(self, pattern: str) -> re.Match[str]:
        while True:
            line = self.lines.get(timeout=120)
            assert line, f"the process ended before printing {pattern!r}: {self.stderr()}"
            if match := re.search(pattern, line):
                return match

    def expect(self, word: str, value: int | None = None) -> int:
        """Wait for the line ``<word> <n>`` (with that ``n`` if given) and return ``n``."""
        while True:
            line = self.lines.get(timeout=60)
            assert line, f"the trainer ended before printing {word} {value}: {self.stderr()}"
            said, number = line.split()
            if said == word and (value is None or int(number) == value):
                return int(number)

    def steps(self, count: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n" * count)
        self.proc.stdin.flush()

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running a minute later: it was not fenced off") from None

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def report(self) -> dict[str, str]:
        report: dict[str, str] = json.loads(self.log.read_text())
        return report

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start_trainer() -> Iterator[Callable[..., Trainer]]:
    """Starts a Trainer (its arguments), killed after the test if it still runs, whatever happened."""
    with contextlib.ExitStack() as started:

        def start(directory: Path, **options: Any) -> Trainer:
            trainer = Trainer(directory, **options)
            started.callback(trainer.kill)
            return trainer

        yield start


def weights(directory: Path) -> list[tuple[int, int, int]]:
    """``(step, attempt, weight)`` of every checkpoint, as a reader (rank 1: no fence) sees them."""
    reader = CheckpointManager(directory, rank=1)
    return [(c.step, c.attempt, json.loads(reader.load(c))["weight"]) for c in reader.checkpoints()]


def test_an_attempt_that_outlives_its_job_is_fenced_off_by_the_next(
    tmp_path: Path, start_trainer: Callable[..., Trainer]
) -> None:
    directory = tmp_path / "ckpt"
    first = start_trainer(directory, attempt=1, steps=1000, paced=True)
    first.steps(3)
    first.expect("saved", 3)
    second = start_trainer(directory, attempt=2, steps=5, paced=True)
    assert second.expect("resumed") == 3
    second.steps(2)
    second.expect("saved", 5)

    first.steps(1)  # attempt 1 goes on training and tries to save step 4
    assert first.wait() == EXIT_FENCED
    message = first.stderr()
    assert "attempt 1 is fenced off" in message and "attempt 2 has started" in message, message
    report = first.report()
    assert (report["status"], report["attempt"], report["fenced_by"]) == ("fenced", "1", "2")

    second.steps(3)
    second.expect("saved", 8)
    assert second.wait() == 0, second.stderr()
    assert weights(directory) == [(6, 2, 6), (7, 2, 7), (8, 2, 8)]
    assert second.report()["status"] == "completed"


def test_a_pipeline_step_continues_a_retried_step_in_the_same_directory(
    tmp_path: Path, start_trainer: Callable[..., Trainer]
) -> None:
    # docs/kfp.md's pipeline: a PyTorchJob trains into the claim and was retried once; a TrainJob (a
    # lineage of its own, at attempt 1) continues from its last checkpoint in the same directory.
    directory = tmp_path / "ckpt"
    first, continuation = "digits-pytorchjob-5f3a1c2e", "digits-trainjob-5f3a1c2e"
    first_try = start_trainer(directory, attempt=1, steps=1000, paced=True, lineage=first)
    first_try.steps(3)
    first_try.expect("saved", 3)
    retry = start_trainer(directory, attempt=2, steps=2, paced=False, lineage=first)
    assert retry.expect("resumed") == 3
    assert retry.wait() == 0, retry.stderr()  # saved steps 4 and 5, attempt 2

    cont = start_trainer(directory, attempt=1, steps=1000, paced=True, lineage=continuation)
    assert cont.expect("resumed") == 5, "not fenced off, and resumed from the first job's last step"
    cont.steps(2)
    cont.expect("saved", 7)
    # Its step 7 (attempt 1) wins over the first job's step 5 (attempt 2): a retry resumes from it.
    cont_retry = start_trainer(directory, attempt=2, steps=3, paced=False, lineage=continuation)
    assert cont_retry.expect("resumed") == 7
    assert cont_retry.wait() == 0, cont_retry.stderr()

    for leftover, lineage in ((first_try, first), (cont, continuation)):
        leftover.steps(1)  # still running, tries to save its next step
        assert leftover.wait() == EXIT_FENCED, leftover.stderr()
        message = leftover.stderr()
        assert f"attempt 1 of lineage {lineage} is fenced off" in message, message
        report = leftover.report()
        assert (report["status"], report["attempt"], report["fenced_by"]) == ("fenced", "1", "2")

    # Each lineage kept its last 3, and the continuation's retention left the first job's alone.
    # Weight equal to step: the continuation carried on the first job's state, never mixing.
    reader = CheckpointManager(directory, rank=1)
    assert [
        (c.lineage, c.attempt, c.step, json.loads(reader.load(c))["weight"]) for c in reader.checkpoints()
    ] == [
        (first, 1, 3, 3),
        (first, 2, 4, 4),
        (first, 2, 5, 5),
        (continuation, 2, 8, 8),
        (continuation, 2, 9, 9),
        (continuation, 2, 10, 10),
    ]
    assert sorted(os.listdir(directory / ".fence")) == [
        f"attempt-1@{first}",
        f"attempt-1@{continuation}",
        f"attempt-2@{first}",
        f"attempt-2@{continuation}",
    ]
    assert not [p.name for p in directory.iterdir() if p.name.startswith((".tmp-", ".trash-"))]


def test_racing_attempts_leave_the_newest_attempts_checkpoints_intact(
    tmp_path: Path, start_trainer: Callable[..., Trainer]
) -> None:
    # No pacing: attempt 1 saves as fast as it can, steps overlapping attempt 2's, until fenced.
    directory = tmp_path / "ckpt"
    first = start_trainer(directory, attempt=1, steps=1_000_000, paced=False)
    first.expect("saved", 20)
    second = start_trainer(directory, attempt=2, steps=40, paced=False)
    resumed = second.expect("resumed")
    assert resumed >= 20
    assert first.wait() == EXIT_FENCED, first.stderr()
    assert second.wait() == 0, second.stderr()
    last = resumed + 40
    assert weights(directory) == [(step, 2, step) for step in range(last - 2, last + 1)]
    latest = CheckpointManager(directory, rank=1).latest()
    assert latest is not None and (latest.step, latest.attempt) == (last, 2)
    assert not [p.name for p in directory.iterdir() if p.name.startswith((".tmp-", ".trash-"))]


def test_the_example_stops_every_rank_with_the_fenced_exit_code(
    tmp_path: Path, start_trainer: Callable[..., Trainer]
) -> None:
    # examples/train_ddp.py, two DDP ranks on gloo: only rank 0 sees the fence, and both stop with
    # its exit code rather than rank 1 dying of a broken connection at its next collective.
    directory = tmp_path / "ckpt"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = []
    for rank in (0, 1):
        env = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "CUDA_VISIBLE_DEVICES": "",
        }
        ranks.append(
            start_trainer(
                directory,
                attempt=1,
                steps=0,
                paced=False,
                command=["examples/train_ddp.py", "--steps=100000", "--checkpoint-every=20"],
                extra_env=env,
                name=f"rank-{rank}",
            )
        )
    ranks[0].expect_line(r"\[rank 0\] checkpoint saved step=40")
    CheckpointManager(directory, rank=0, attempt=2).start()  # attempt 2's rank 0 starts
    codes = [r.wait() for r in ranks]
    assert codes == [EXIT_FENCED, EXIT_FENCED], [r.stderr()[-3000:] for r in ranks]
    ranks[1].expect_line(r"\[rank 1\] stopping: rank 0 was fenced off")
    report = ranks[0].report()
    assert (report["status"], report["attempt"], report["fenced_by"]) == ("fenced", "1", "2")
    assert "attempt 1 is fenced off" in ranks[0].stderr()
