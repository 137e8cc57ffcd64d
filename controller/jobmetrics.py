"""Per-job training gauges: the progress, ETA, step and last metrics every unfinished job reported.

A collector rather than series kept up to date: each scrape reads the job informers' caches, so the
reports cost nothing between scrapes, and a job that finishes or is deleted leaves ``/metrics`` at the
next scrape with no series to forget. Cardinality is bounded, as docs/observability.md says: only
unfinished jobs that reported progress, at most ``max_jobs`` of them (the most recently started first;
``kubetrain_job_progress_jobs_left_out`` counts the rest), and at most ``MAX_METRICS`` numeric metrics
per job, in the order the training reported them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubetrain.api.objects import Obj
from kubetrain.client import kinds

MAX_METRICS = 8
MAX_JOBS = 500
LABELS = ("job_namespace", "kind", "job")


@dataclass(frozen=True)
class JobProgress:
    """What one job last reported, as numbers."""

    labels: tuple[str, str, str]
    percent: float | None
    eta_seconds: float | None
    step: float | None
    total_steps: float | None
    metrics: dict[str, float] = field(default_factory=dict)


def _number(value: object) -> float | None:
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def progress_of(job: Obj) -> JobProgress | None:
    """The job's last report as numbers; None for a finished job or one that reported nothing."""
    reported = kinds.trainer_status(job)
    if not reported or kinds.is_finished(job):
        return None
    values = {str(m.get("name")): _number(m.get("value")) for m in reported.get("metrics") or []}
    step, total = (values.pop(name, None) for name in kinds.STEP_METRICS)
    numeric = {name: value for name, value in values.items() if value is not None}
    meta = job["metadata"]
    return JobProgress(
        labels=(meta["namespace"], job["kind"], meta["name"]),
        percent=_number(reported.get("progressPercentage")),
        eta_seconds=_number(reported.get("estimatedRemainingSeconds")),
        step=step,
        total_steps=total,
        metrics=dict(list(numeric.items())[:MAX_METRICS]),
    )


def progress_rows(jobs: Iterable[Obj], max_jobs: int) -> tuple[list[JobProgress], int]:
    """The jobs to export (the most recently started first) and how many the limit left out."""
    reporting = [(job, found) for job in jobs if (found := progress_of(job)) is not None]
    reporting.sort(key=lambda pair: str((pair[0].get("status") or {}).get("startTime") or ""), reverse=True)
    return [found for _, found in reporting[:max_jobs]], max(0, len(reporting) - max_jobs)


class JobProgressCollector(Collector):
    """The gauges above, over the job caches of every controller in this process that is running."""

    def __init__(self, max_jobs: int = MAX_JOBS) -> None:
        self.max_jobs = max_jobs
        self._sources: list[Callable[[], Iterable[Obj]]] = []

    def add(self, source: Callable[[], Iterable[Obj]]) -> None:
        self._sources.append(source)

    def remove(self, source: Callable[[], Iterable[Obj]]) -> None:
        if source in self._sources:
            self._sources.remove(source)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows, left_out = progress_rows((job for source in self._sources for job in source()), self.max_jobs)
        families = {
            "percent": GaugeMetricFamily(
                "kubetrain_job_progress_percent", "Progress the training last reported, 0-100.", labels=LABELS
            ),
            "eta_seconds": GaugeMetricFamily(
                "kubetrain_job_eta_seconds", "Time left the training last estimated.", labels=LABELS
            ),
            "step": GaugeMetricFamily(
                "kubetrain_job_step", "Step the training last reported.", labels=LABELS
            ),
            "total_steps": GaugeMetricFamily(
                "kubetrain_job_total_steps", "Steps the training said it will run.", labels=LABELS
            ),
        }
        metric = GaugeMetricFamily(
            "kubetrain_job_metric",
            f"A metric the training last reported (loss, accuracy...; at most {MAX_METRICS} per job).",
            labels=(*LABELS, "metric"),
        )
        for row in rows:
            for name, family in families.items():
                value = getattr(row, name)
                if value is not None:
                    family.add_metric(row.labels, value)
            for name, value in row.metrics.items():
                metric.add_metric((*row.labels, name), value)
        yield from families.values()
        yield metric
        dropped = GaugeMetricFamily(
            "kubetrain_job_progress_jobs_left_out",
            f"Reporting jobs left out of the kubetrain_job_* gauges by their limit of {self.max_jobs}.",
        )
        dropped.add_metric((), left_out)
        yield dropped
