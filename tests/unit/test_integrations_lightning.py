"""A real (tiny) Lightning run, preempted and resumed through kubetrain.integrations.lightning."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.integrations.lightning import resume_point
from tests.unit.integration_runs import preempted, run_worker, trained_steps

pytestmark = pytest.mark.unit
WORKER = "tests.unit.lightning_worker"


def test_a_preempted_fit_saves_where_it_stops_and_the_retry_resumes_there(tmp_path: Path) -> None:
    out, report = tmp_path / "out", tmp_path / "report.json"
    first = preempted(WORKER, out, 8, sigterm_at=3)
    assert first.report["step"] == 3
    assert first.report["last_checkpoint"] == str(out / "preempted-step=3.ckpt") == resume_point(out)

    second = run_worker(WORKER, out, "8", report=report)
    assert second.code == 0, second.output
    assert second.report["status"] == "completed" and second.report["step"] == 8
    assert second.report["resumed_from_step"] == 3
    assert Path(second.report["last_checkpoint"]).name in ("epoch=0-step=8.ckpt", "last.ckpt")
    assert "loss" in second.report["metrics"]
    assert trained_steps(out) == [1, 2, 3, 4, 5, 6, 7, 8], "every step trained once, in order"


def test_no_checkpoint_yet_means_a_fresh_start(tmp_path: Path) -> None:
    assert resume_point(tmp_path) is None
