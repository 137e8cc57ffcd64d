"""Running a trainer worker (``tests/unit/hf_worker.py``, ``lightning_worker.py``) as a pod would: its own
process, with the termination report written to a file the test reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.checkpoint import EXIT_TERMINATED

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    code: int
    report: dict[str, Any]
    output: str


def run_worker(module: str, directory: Path, *args: str, report: Path) -> Run:
    report.unlink(missing_ok=True)
    env = {
        **os.environ,
        "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(report),
        "KUBETRAIN_CHECKPOINT_DIR": str(directory),
        "TOKENIZERS_PARALLELISM": "false",
    }
    for name in (
        "KUBETRAIN_ATTEMPT",
        "KUBETRAIN_LINEAGE",
        "KUBETRAIN_RESUME_FROM",
        "KUBEFLOW_TRAINER_SERVER_URL",
    ):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", module, str(directory), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    written = json.loads(report.read_text()) if report.exists() else {}
    return Run(done.returncode, written, done.stdout + done.stderr)


def trained_steps(directory: Path) -> list[int]:
    """The global step after each optimizer step the runs trained, in order."""
    return [int(line) for line in (directory / "steps.txt").read_text().split()]


def preempted(module: str, directory: Path, max_steps: int, sigterm_at: int, *args: str) -> Run:
    """A run sent SIGTERM at ``sigterm_at``: it must stop as a disruption does (exit 143, ``preempted``)."""
    run = run_worker(
        module,
        directory,
        str(max_steps),
        "--sigterm-at",
        str(sigterm_at),
        *args,
        report=directory.parent / "report.json",
    )
    assert run.code == EXIT_TERMINATED, run.output
    assert run.report["status"] == "preempted", run.report
    return run
