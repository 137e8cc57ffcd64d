"""Running an attempt, without a cluster: when a wait gives up, which events it shows, what a result says.

Airflow, KFP and the CLI wait through ``attempt.follow`` and read results through ``attempt.Result``;
these tests are the contract their own tests (against a cluster) rely on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from kubetrain.client import attempt
from kubetrain.client.attempt import Deadline, Event, Result
from kubetrain.client.errors import JobNotFoundError
from kubetrain.client.sync import JobClient

Obj = dict[str, Any]


def job(state: str = "Running", *, queued: bool = False, **annotations: str) -> Obj:
    conditions = {"Running": [{"type": "Running", "status": "True"}], "Pending": []}.get(
        state, [{"type": state, "status": "True"}]
    )
    labels = {"kueue.x-k8s.io/queue-name": "team-a"} if queued else {}
    return {
        "kind": "PyTorchJob",
        "metadata": {
            "name": "mnist",
            "namespace": "ml",
            "uid": "u-1",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"runPolicy": {"suspend": queued}},
        "status": {"conditions": conditions},
    }


class Watcher:
    """A client whose watch plays one window of jobs per call; records the timeouts it was given."""

    def __init__(self, *windows: list[Obj]) -> None:
        self.windows = list(windows)
        self.timeouts: list[float | None] = []

    def watch(self, kind: str, name: str, namespace: str, *, timeout: float | None = None) -> Iterator[Obj]:
        self.timeouts.append(timeout)
        yield from self.windows.pop(0) if self.windows else []


def events(client: Watcher, **options: Any) -> list[tuple[Event, str]]:
    seen = attempt.follow(cast(JobClient, client), "PyTorchJob", "mnist", "ml", **options)
    return [(s.event, str(s.job["status"]["conditions"][:1])) for s in seen]


def test_a_deadline_without_a_timeout_never_passes_and_watches_in_windows_of_every() -> None:
    deadline = Deadline.start(None, now=100.0)
    assert (
        not deadline.passed(1e9) and deadline.window(30.0, 1e9) == 30.0 and deadline.window(None, 0) is None
    )


def test_a_deadline_counts_from_the_start_unless_it_counts_from_admission() -> None:
    queued = job("Suspended", queued=True)
    plain = Deadline.start(60.0, now=100.0).seen(queued, 150.0)
    assert plain.at == 160.0 and plain.window(30.0, 150.0) == 10.0 and plain.passed(160.0)
    admitted = Deadline.start(60.0, from_admission=True, now=100.0)
    assert admitted.seen(queued, 150.0).at == 210.0, "the clock starts again while Kueue holds the job"
    assert admitted.seen(job("Running"), 150.0).at == 160.0


def test_a_wait_shows_each_change_a_status_line_per_window_and_ends_when_the_job_finishes() -> None:
    client = Watcher([job("Pending"), job("Running")], [job("Running")], [job("Succeeded")])
    seen = [event for event, _ in events(client, every=30.0)]
    assert seen == [Event.CHANGED, Event.CHANGED, Event.DUE, Event.CHANGED, Event.DUE, Event.FINISHED]
    assert client.timeouts == [30.0, 30.0, 30.0]


def test_a_wait_times_out_after_a_window_and_always_looks_at_the_job_once() -> None:
    client = Watcher([job("Running")], [job("Running")])
    assert [event for event, _ in events(client, timeout=0.0)] == [Event.CHANGED, Event.DUE, Event.TIMED_OUT]
    assert client.timeouts[0] is not None and client.timeouts[0] <= 0
    finished = Watcher([job("Failed")])
    assert [event for event, _ in events(finished, timeout=0.0)] == [Event.FINISHED]


def test_a_job_that_a_watch_never_shows_is_gone() -> None:
    with pytest.raises(JobNotFoundError, match="PyTorchJob ml/mnist disappeared"):
        events(Watcher([]), every=1.0)


def test_a_result_reads_the_report_the_checkpoint_annotation_and_the_attempt() -> None:
    report = '{"last_checkpoint": "/ckpt/step-10", "metrics": {"loss": 0.5, "perplexity": NaN, "epochs": 3}}'
    finished = job(
        "Succeeded",
        **{"kubetrain.dev/training-report": report, "kubetrain.dev/attempt": "2"},
    )
    result = Result.of(finished)
    assert (result.kind, result.name, result.namespace, result.uid, result.state, result.attempt) == (
        "PyTorchJob",
        "mnist",
        "ml",
        "u-1",
        "Succeeded",
        2,
    )
    assert result.last_checkpoint == "/ckpt/step-10" and result.metrics["perplexity"] is None
    assert result.numbers() == {"loss": 0.5, "epochs": 3.0}
    annotated = job("Succeeded", **{"kubetrain.dev/last-checkpoint": "/ckpt/step-12"})
    assert Result.of(annotated).last_checkpoint == "/ckpt/step-12" and Result.of(annotated).attempt == 1
    assert Result.of(job("Failed")).last_checkpoint is None and Result.of(job("Failed")).metrics == {}
