"""Child writes: who holds a name, what a finished job deletes, slow-start batches, expectations on errors.

The writer is driven here by a small in-memory stand-in for the API client (unit tier); the same
behaviour against the real API server under injected faults is in tests/faults.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kubetrain.controller.core.writes import (
    FAILED_CREATE,
    INVALID_POD_TEMPLATE,
    NAME_CONFLICT,
    ChildRejectedError,
    ChildWriter,
    Ownership,
    Rejections,
    ownership,
)
from kubetrain.controller.v1.decisions import cleanup_targets
from kubetrain.kube import errors
from kubetrain.kube.events import EventRecorder
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.resources import PODS, Resource
from kubetrain.kube.runner import RetryLaterError

JOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
}


def owned_by(kind: str, name: str, uid: str, **meta: Any) -> dict[str, Any]:
    ref = {"apiVersion": "kubeflow.org/v1", "kind": kind, "name": name, "uid": uid, "controller": True}
    return {"metadata": {"name": "j-worker-0", "ownerReferences": [ref], **meta}}


@pytest.mark.parametrize(
    ("obj", "verdict"),
    [
        (owned_by("PyTorchJob", "j", "job-uid"), Ownership.OURS),
        (owned_by("PyTorchJob", "j", "old-uid"), Ownership.STALE),
        (owned_by("TFJob", "j", "tf-uid", deletionTimestamp="2026-01-01T00:00:00Z"), Ownership.STALE),
        (owned_by("TFJob", "j", "tf-uid"), Ownership.FOREIGN),
        ({"metadata": {"name": "j-worker-0"}}, Ownership.FOREIGN),
        (None, Ownership.GONE),
    ],
)
def test_who_holds_a_childs_name(obj: dict[str, Any] | None, verdict: Ownership) -> None:
    assert ownership(obj, JOB) is verdict


def pod(name: str, phase: str | None, *, leaving: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": name}
    if leaving:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


PODS_NOW = [pod("m", "Succeeded"), pod("w0", "Running"), pod("w1", "Pending"), pod("w2", None, leaving=True)]
SERVICES_NOW = [{"metadata": {"name": n}} for n in ("m", "w0", "w1", "w2")]


@pytest.mark.parametrize(
    ("policy", "failed", "pods", "services"),
    [
        ("None", False, [], []),
        ("Running", False, ["w0", "w1"], ["w0", "w1"]),
        ("All", False, ["m", "w0", "w1"], ["m", "w0", "w1", "w2"]),
        # A failed job never keeps a pod running, whatever the policy (a retry would train beside it).
        ("None", True, ["w0", "w1"], ["w0", "w1"]),
        ("All", True, ["m", "w0", "w1"], ["m", "w0", "w1", "w2"]),
    ],
)
def test_what_a_finished_job_deletes(policy: str, failed: bool, pods: list[str], services: list[str]) -> None:
    doomed, doomed_services = cleanup_targets(
        PODS_NOW, SERVICES_NOW, policy=policy, finished=True, failed=failed
    )
    assert [p["metadata"]["name"] for p in doomed] == pods
    assert [s["metadata"]["name"] for s in doomed_services] == services


def test_suspending_deletes_every_live_pod_and_service() -> None:
    doomed, services = cleanup_targets(PODS_NOW, SERVICES_NOW, policy="None", finished=False, failed=False)
    assert len(doomed) == 3 and len(services) == 4


class FakeKube:
    """Answers creates and deletes from a script: a name maps to an exception to raise."""

    def __init__(self, failures: dict[str, BaseException] | None = None) -> None:
        self.failures = failures or {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.preconditions: list[str | None] = []

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        await asyncio.sleep(0)
        if name in self.failures:
            raise self.failures[name]
        return body

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        return self.objects.get(name)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **kw: Any) -> bool:
        self.calls.append(("delete", name))
        self.preconditions.append(kw.get("uid"))
        if name in self.failures:
            raise self.failures[name]
        return True


def events(child_writer: ChildWriter) -> list[tuple[str, str, str]]:
    """(type, reason, message) of what the writer recorded (the recorder is not started: all queued)."""
    queue = child_writer.recorder._queue
    return [(e.event_type, e.reason, e.message) for e in list(queue._queue)]  # type: ignore[attr-defined]


def writer(kube: FakeKube) -> tuple[ChildWriter, Expectations]:
    expectations = Expectations()
    recorder = EventRecorder(kube, "test")  # type: ignore[arg-type]
    return ChildWriter(kube, expectations, recorder, concurrency=64), expectations  # type: ignore[arg-type]


def bodies(count: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"p{i}"}} for i in range(count)]


def api_error(cls: type[errors.APIError], status: int, message: str = "no") -> errors.APIError:
    return cls(status, {"message": message, "reason": "x"})


async def test_creates_go_in_slow_start_batches_that_stop_at_the_first_error() -> None:
    kube = FakeKube({"p3": api_error(errors.APIServerError, 500, "etcdserver: request timed out")})
    child_writer, expectations = writer(kube)
    with pytest.raises(errors.APIServerError, match="timed out"):
        await child_writer.create_all(JOB, PODS, bodies(20), track=True)
    # Batches of 1, 2, 4: p3 is in the third batch, which ends the pass; p7 onwards never went out.
    assert [name for _, name in kube.calls] == [f"p{i}" for i in range(7)]
    # The expectation counts only the creates whose add events will come (6 of them).
    for _ in range(6):
        assert not expectations.satisfied("ns/j")
        expectations.creation_observed("ns/j")
    assert expectations.satisfied("ns/j")


async def test_a_failed_delete_lowers_its_expectation_so_the_job_is_not_frozen() -> None:
    kube = FakeKube({"w0": api_error(errors.APIServerError, 503)})
    child_writer, expectations = writer(kube)
    with pytest.raises(errors.APIServerError):
        await child_writer.delete_all(JOB, PODS, [pod("w0", "Failed"), pod("w1", "Failed")])
    assert ("delete", "w1") in kube.calls, "one failure does not stop the other deletes"
    expectations.deletion_observed("ns/j", "w1")  # w1's delete event
    assert expectations.satisfied("ns/j")


async def test_a_create_that_fails_outside_the_api_lowers_its_expectation() -> None:
    kube = FakeKube({"p0": TimeoutError()})
    child_writer, expectations = writer(kube)
    with pytest.raises(TimeoutError):
        await child_writer.create_all(JOB, PODS, bodies(3), track=True)
    assert expectations.satisfied("ns/j")


async def test_a_409_for_a_child_of_this_job_is_success_and_one_of_an_earlier_job_is_waited_for() -> None:
    kube = FakeKube({"p0": api_error(errors.APIConflictError, 409, "already exists")})
    kube.objects["p0"] = owned_by("PyTorchJob", "j", "job-uid")
    child_writer, _ = writer(kube)
    await child_writer.create_all(JOB, PODS, bodies(1), track=True)
    kube.objects["p0"] = owned_by("PyTorchJob", "j", "earlier-uid")
    with pytest.raises(RetryLaterError):
        await child_writer.create_all(JOB, PODS, bodies(1), track=True)


INVALID = "spec.containers[0].name: Invalid value"
OVER_QUOTA = 'pods "p0" is forbidden: exceeded quota'


@pytest.mark.parametrize(
    ("status", "server_says", "holder", "reason", "fail_after", "said"),
    [
        (409, "already exists", "TFJob", NAME_CONFLICT, 1, "Pod p0 already exists and belongs to TFJob j"),
        (422, INVALID, None, INVALID_POD_TEMPLATE, 3, INVALID),
        (403, OVER_QUOTA, None, FAILED_CREATE, None, OVER_QUOTA),
    ],
    ids=["a-name-held-by-another-job", "an-invalid-pod", "a-forbidden-pod"],
)
async def test_a_child_the_api_server_refuses_is_rejected_with_a_reason_a_limit_and_the_cause(
    status: int, server_says: str, holder: str | None, reason: str, fail_after: int | None, said: str
) -> None:
    """A name another job holds fails the job at once, naming the holder; an invalid pod on the third
    pass in a row, with the server's message; a forbidden one never (the job reports it, and retries)."""
    body = json.dumps({"message": server_says, "reason": "x"}).encode()
    kube = FakeKube({"p0": errors.for_status(status, body, method="POST", path="/api/v1/namespaces/ns/pods")})
    if holder is not None:
        kube.objects["p0"] = owned_by(holder, "j", "other-uid")
    child_writer, _ = writer(kube)
    with pytest.raises(ChildRejectedError) as raised:
        await child_writer.create_all(JOB, PODS, bodies(4), track=True)
    assert (raised.value.reason, raised.value.fail_after) == (reason, fail_after)
    assert said in raised.value.message


def test_a_refusal_without_a_limit_never_fails_the_job() -> None:
    rejections = Rejections()
    forbidden = ChildRejectedError(FAILED_CREATE, "cannot create pod p0: exceeded quota", fail_after=None)
    assert not any(rejections.fails_job("ns/j", forbidden) for _ in range(10))


def test_an_invalid_child_fails_the_job_on_the_third_pass_in_a_row() -> None:
    rejections = Rejections()
    invalid = ChildRejectedError(INVALID_POD_TEMPLATE, "bad", fail_after=3)
    assert [rejections.fails_job("ns/j", invalid) for _ in range(3)] == [False, False, True]
    rejections.fails_job("ns/j", invalid)
    rejections.forget("ns/j")  # a pass that went through starts the count again
    assert [rejections.fails_job("ns/j", invalid) for _ in range(3)] == [False, False, True]


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (api_error(errors.APIServerError, 503, "etcdserver: leader changed"), "etcdserver: leader changed"),
        (ConnectionResetError("connection reset by peer"), "connection reset by peer"),
        (TimeoutError(), "TimeoutError"),
    ],
)
async def test_a_pass_whose_creates_fail_posts_one_warning_naming_the_first_and_counting_the_rest(
    error: BaseException, text: str
) -> None:
    # p0 goes out alone and succeeds; p1 and p2 form the second batch and both fail.
    kube = FakeKube({"p1": error, "p2": error})
    child_writer, _ = writer(kube)
    with pytest.raises(type(error)):
        await child_writer.create_all(JOB, PODS, bodies(30), track=True)
    assert events(child_writer) == [
        ("Normal", "SuccessfulCreatePod", "Created pod: p0"),
        ("Warning", "FailedCreatePod", f"Error creating p1: {text} (and 1 more in this batch)"),
    ]


async def test_a_singleton_child_is_deleted_only_when_this_job_controls_it_and_only_by_its_uid() -> None:
    kube = FakeKube()
    child_writer, _ = writer(kube)

    def child(kind: str, owner_uid: str, uid: str) -> dict[str, Any]:
        obj = owned_by(kind, "j", owner_uid)
        obj["metadata"].update(uid=uid, namespace="ns")
        return obj

    ours, theirs = child("PyTorchJob", "job-uid", "hpa-uid"), child("TFJob", "tf-uid", "other-uid")
    earlier = child("PyTorchJob", "earlier-uid", "old-uid")
    assert not await child_writer.delete_owned(JOB, PODS, theirs)
    assert not await child_writer.delete_owned(JOB, PODS, earlier)
    assert not await child_writer.delete_owned(JOB, PODS, None)
    assert kube.calls == []
    assert await child_writer.delete_owned(JOB, PODS, ours)
    assert kube.preconditions == ["hpa-uid"], "the delete is guarded by the uid it was decided for"
