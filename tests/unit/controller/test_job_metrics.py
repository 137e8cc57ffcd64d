"""Which jobs the per-job gauges export, and how many: finished and silent jobs none, a bounded number
of the rest, the newest first, numbers only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kubetrain import naming
from kubetrain.controller.jobmetrics import MAX_METRICS, JobProgressCollector, progress_of, progress_rows

pytestmark = pytest.mark.unit


def job(
    name: str, *, started: str = "2026-12-01T10:00:00Z", done: bool = False, **report: Any
) -> dict[str, Any]:
    conditions = (
        [{"type": "Succeeded", "status": "True"}] if done else [{"type": "Running", "status": "True"}]
    )
    annotations = {naming.ANNOTATION_TRAINER_STATUS: json.dumps(report)} if report else {}
    return {
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team", "annotations": annotations},
        "status": {"conditions": conditions, "startTime": started},
    }


def test_a_report_becomes_numbers_and_words_are_left_out() -> None:
    metrics = [
        {"name": "currentStep", "value": "7"},
        {"name": "loss", "value": "0.5"},
        {"name": "phase", "value": "eval"},
    ]
    found = progress_of(job("a", progressPercentage=70, metrics=metrics))
    assert found is not None
    assert (found.percent, found.step, found.total_steps, found.eta_seconds) == (70, 7, None, None)
    assert found.metrics == {"loss": 0.5}


def test_finished_and_silent_jobs_are_not_exported() -> None:
    assert progress_of(job("done", done=True, progressPercentage=100)) is None
    assert progress_of(job("silent")) is None


def test_the_limit_keeps_the_newest_jobs_and_counts_the_rest() -> None:
    jobs = [job(f"j{i}", started=f"2026-12-01T10:0{i}:00Z", progressPercentage=i) for i in range(5)]
    rows, left_out = progress_rows(jobs, 2)
    assert [r.labels[2] for r in rows] == ["j4", "j3"] and left_out == 3


def test_metrics_per_job_are_capped() -> None:
    many = [{"name": f"m{i}", "value": str(i)} for i in range(MAX_METRICS + 4)]
    found = progress_of(job("a", metrics=many))
    assert found is not None and list(found.metrics) == [f"m{i}" for i in range(MAX_METRICS)]


def test_the_collector_exports_every_source_and_forgets_a_removed_one() -> None:
    collector = JobProgressCollector(max_jobs=10)
    registry = CollectorRegistry()
    registry.register(collector)
    source = lambda: [job("a", progressPercentage=40, estimatedRemainingSeconds=60)]  # noqa: E731
    collector.add(source)
    text = generate_latest(registry).decode()
    assert 'kubetrain_job_progress_percent{job="a",job_namespace="team",kind="PyTorchJob"} 40.0' in text
    assert 'kubetrain_job_eta_seconds{job="a",job_namespace="team",kind="PyTorchJob"} 60.0' in text
    assert "kubetrain_job_progress_jobs_left_out 0.0" in text
    collector.remove(source)
    assert 'job="a"' not in generate_latest(registry).decode()
