"""A real (tiny) Hugging Face Trainer, preempted and resumed through kubetrain.integrations.hf."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.integrations.hf import resume_point
from tests.unit.integration_runs import preempted, run_worker, trained_steps

pytestmark = pytest.mark.unit
WORKER = "tests.unit.hf_worker"


def test_a_preempted_trainer_saves_where_it_stops_and_the_retry_resumes_there(tmp_path: Path) -> None:
    out, report = tmp_path / "out", tmp_path / "report.json"
    first = preempted(WORKER, out, 6, sigterm_at=3)
    stopped = first.report["step"]
    assert stopped in (3, 4)  # the end of the step SIGTERM hit
    assert first.report["last_checkpoint"] == str(out / f"checkpoint-{stopped}")
    assert "loss" in first.report["metrics"]
    assert resume_point(out) == str(out / f"checkpoint-{stopped}")

    second = run_worker(WORKER, out, "6", report=report)
    assert second.code == 0, second.output
    assert second.report["status"] == "completed" and second.report["step"] == 6
    assert second.report["resumed_from_step"] == stopped
    assert second.report["last_checkpoint"] == str(out / "checkpoint-6")
    assert trained_steps(out) == [1, 2, 3, 4, 5, 6], "every step trained once, in order"


def test_with_the_trainers_own_jit_checkpoint_the_report_names_what_it_saved(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = preempted(WORKER, out, 12, 2, "--jit")
    last = trained_steps(out)[-1]
    assert last < 12, "training stopped early"
    # The JIT save runs at the next hook after its flag: before the optimizer step (the state of the
    # step before) or after it (the step itself).
    saved = {str(out / f"checkpoint-{step}") for step in (last - 1, last)}
    assert run.report["last_checkpoint"] == resume_point(out) and run.report["last_checkpoint"] in saved


def test_a_crash_reports_the_error_and_the_last_checkpoint(tmp_path: Path) -> None:
    out, report = tmp_path / "out", tmp_path / "report.json"
    run = run_worker(WORKER, out, "6", "--crash-at", "3", report=report)
    assert run.code == 1
    assert run.report["status"] == "failed" and "crashed at step 3" in run.report["error"]
    assert run.report["last_checkpoint"] == str(out / "checkpoint-2")


def test_no_checkpoint_yet_means_a_fresh_start_and_a_url_is_refused(tmp_path: Path) -> None:
    assert resume_point(tmp_path) is None
    with pytest.raises(ValueError, match="local directory"):
        resume_point("s3://bucket/run")
