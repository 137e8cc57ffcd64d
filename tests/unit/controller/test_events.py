"""What a queued Event keeps: a reference to its job as it was (never the job), and the time it was
recorded, not the time the recorder got round to posting it."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.kube import events
from kubetrain.kube.events import EventRecorder

JOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "5"},
}


class Kube:
    """Stands in for the recorder's client: keeps what was created and patched."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[dict[str, Any]] = []

    async def create(self, resource: object, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        self.created.append(body)
        return body

    async def patch(self, resource: object, name: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patched.append(body)
        return body


async def test_an_event_posted_late_keeps_the_time_it_was_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a burst of thousands of jobs the queue falls seconds behind the reconciles."""
    clock = ["2026-01-01T00:00:00Z"]
    monkeypatch.setattr(events, "_now", lambda: clock[0])
    kube = Kube()
    recorder = EventRecorder(kube, "test")  # type: ignore[arg-type]
    recorder.event(JOB, "Normal", "SuccessfulCreatePod", "Created pods: j-master-0")
    clock[0] = "2026-01-01T00:00:07Z"
    recorder.event(JOB, "Normal", "SuccessfulCreatePod", "Created pods: j-master-0")
    clock[0] = "2026-01-01T00:00:30Z"  # the recorder posts them only now
    await recorder._post(recorder._queue.get_nowait())
    await recorder._post(recorder._queue.get_nowait())
    [body] = kube.created
    assert (body["firstTimestamp"], body["lastTimestamp"]) == ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
    assert kube.patched == [{"count": 2, "lastTimestamp": "2026-01-01T00:00:07Z"}], "the repeat, aggregated"


async def test_a_queued_event_holds_a_reference_to_its_job_as_it_was_never_the_job() -> None:
    """At thousands of jobs the queue holds thousands of events: each must not keep a job copy alive."""
    kube = Kube()
    recorder = EventRecorder(kube, "test")  # type: ignore[arg-type]
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "5", "labels": {}},
        "spec": {"pytorchReplicaSpecs": {}},
        "status": {},
    }
    recorder.event(job, "Normal", "Created", "created")
    job["metadata"]["resourceVersion"] = "6"
    pending = recorder._queue.get_nowait()
    assert pending.involved == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "j",
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "5",
    }
    await recorder._post(pending)
    posted = kube.created
    assert posted[0]["involvedObject"] == pending.involved and posted[0]["metadata"]["name"].startswith("j.")
