"""The controller's ``/metrics`` carries what each unfinished job last reported (progress, ETA, step,
metrics), read from its caches at scrape time: a job that is gone leaves no series behind."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import generate_latest

from kubetrain import naming
from kubetrain.controller import metrics
from tests.support import HANG, TRAINER_REPORT, Jobs, eventually, pytorchjob


def _scraped() -> str:
    return generate_latest(metrics.REGISTRY).decode()


async def test_a_reporting_jobs_progress_is_a_gauge_until_the_job_is_gone(
    controller: Any, jobs: Jobs, namespace: str
) -> None:
    await jobs.create(pytorchjob("reporting", workers=1, pod_annotations=HANG))
    await jobs.wait_condition("reporting", "Running", timeout=60)
    # What the status server writes when the training reports (kubetrain.progress, the kubeflow SDK).
    annotations = {
        naming.ANNOTATION_TRAINER_STATUS: json.dumps(TRAINER_REPORT),
        naming.ANNOTATION_PROGRESS: "40",
    }
    await jobs.patch("reporting", {"metadata": {"annotations": annotations}})
    labels = f'job="reporting",job_namespace="{namespace}",kind="PyTorchJob"'  # sorted, as exported

    async def exported() -> str | None:
        text = _scraped()
        return text if f"kubetrain_job_progress_percent{{{labels}}} 40.0" in text else None

    text = await eventually(exported, timeout=30, what="the job's progress on /metrics")
    assert f"kubetrain_job_eta_seconds{{{labels}}} 90.0" in text
    assert f"kubetrain_job_step{{{labels}}} 400.0" in text
    assert f"kubetrain_job_total_steps{{{labels}}} 1000.0" in text
    assert f'kubetrain_job_metric{{{labels},metric="loss"}} 0.25' in text
    assert 'metric="phase"' not in text  # not a number: no series

    await jobs.delete("reporting")

    async def gone() -> bool:
        return labels not in _scraped()

    await eventually(gone, timeout=30, what="the deleted job's series to go")
