"""The deferred wait under API faults: it ends, with the API server's reason, instead of waiting forever.

The triggerer reaches the cluster through the fault proxy (its connection points at the proxy's
kubeconfig); the operator and the test talk to the API server directly. The faults are the real ones a
shared watch meets: the history it resumes from is gone (410) while a job is deleted, the list is
forbidden, the API server answers 503 for longer than a first list may take.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from kubetrain.operators import JobTrigger, PyTorchJobOperator
from kubetrain.operators.compat import AirflowException
from kubetrain.operators.triggers import SharedJobWatch
from tests.airflow.support import deferred_trigger, first_event, task_context
from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import FaultProxy, Rule
from tests.support import HANG, eventually, pytorchjob

pytestmark = pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "crds")

TRIGGERER = "triggerer_network"  # the connection of the triggerer: through the fault proxy


@pytest.fixture
async def proxy(
    kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[FaultProxy]:
    """The fault proxy, and the triggerer's ``kubernetes`` connection that goes through it."""
    proxy = FaultProxy.for_kubeconfig(kubeconfig)
    await proxy.start()
    proxied = proxy.write_kubeconfig(tmp_path / "triggerer.kubeconfig")
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(proxied)}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{TRIGGERER.upper()}", json.dumps(connection))
    yield proxy
    await proxy.stop()


def jobs_path(namespace: str) -> str:
    return rf"/namespaces/{re.escape(namespace)}/pytorchjobs$"


def lists(proxy: FaultProxy, namespace: str) -> int:
    return sum(
        1
        for e in proxy.exchanges
        if e.method == "GET" and re.search(jobs_path(namespace), e.path) and "watch" not in e.query
    )


async def test_a_job_deleted_while_the_watch_was_away_fails_the_task(
    proxy: FaultProxy, namespace: str, custom: client.CustomObjectsApi
) -> None:
    # The watch's history is gone (410), and while the watch lists again the job is deleted: the
    # fresh list lacks it. No DELETED event will ever come for it.
    proxy.add(
        Rule(
            faultproxy.respond(410, reason="Expired", message="too old resource version"),
            method="GET",
            path=jobs_path(namespace),
            watch=True,
            times=1,
        )
    )
    relist = proxy.add(
        Rule(faultproxy.hang(), method="GET", path=jobs_path(namespace), watch=False, skip=1, times=1)
    )
    manifest = pytorchjob("away", workers=0, master_annotations=HANG)
    op = PyTorchJobOperator(
        task_id="train", namespace=namespace, job=manifest, deferrable=True, get_logs=False, status_interval=1
    )
    context = task_context()
    deferred = await asyncio.to_thread(deferred_trigger, op, context)
    _, kwargs = deferred.serialize()  # the trigger as Airflow stores it
    trigger = JobTrigger(**{**kwargs, "kubernetes_conn_id": TRIGGERER})
    waiting = asyncio.ensure_future(first_event(trigger))

    async def relisting() -> bool:
        return relist.fired == 1

    await eventually(relisting, timeout=30, what="the watch to get 410 and list again")
    await custom.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "away")

    async def deleted() -> bool:
        listed = await custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
        return not listed["items"]

    await eventually(deleted, timeout=30, what="the job to be gone")
    proxy.release()  # the list now answers, without the job
    event = await asyncio.wait_for(waiting, 30)
    assert event["status"] == "error", event
    with pytest.raises(
        AirflowException,
        match=f"PyTorchJob {namespace}/away no longer exists: it was deleted while the task waited for it",
    ):
        await asyncio.to_thread(op.execute_complete, context, event)


async def test_a_forbidden_list_fails_the_wait_with_the_api_servers_message(
    proxy: FaultProxy, namespace: str
) -> None:
    message = (
        'pytorchjobs.kubeflow.org is forbidden: User "airflow-triggerer" cannot list resource "pytorchjobs"'
    )
    proxy.add(
        Rule(faultproxy.respond(403, message=message), method="GET", path=jobs_path(namespace), watch=False)
    )
    trigger = JobTrigger(kind="PyTorchJob", name="train", namespace=namespace, kubernetes_conn_id=TRIGGERER)
    event = await asyncio.wait_for(first_event(trigger), 30)
    assert event["status"] == "error"
    assert event["message"] == (
        f"PyTorchJob {namespace}/train: the API server refused to list or watch pytorchjobs in namespace "
        f"{namespace}: {message} (HTTP 403)"
    )
    assert lists(proxy, namespace) == 1, "a refusal that will not change is not tried again"


async def test_the_first_list_has_a_deadline(
    proxy: FaultProxy, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SharedJobWatch, "first_list_deadline", 4.0)
    proxy.add(Rule(faultproxy.respond(503), method="GET", path=jobs_path(namespace), watch=False))
    trigger = JobTrigger(kind="PyTorchJob", name="train", namespace=namespace, kubernetes_conn_id=TRIGGERER)
    event = await asyncio.wait_for(first_event(trigger), 30)
    assert event["status"] == "error"
    assert f"could not list pytorchjobs in namespace {namespace} within 4s" in event["message"]
    assert "injected by the fault proxy (HTTP 503)" in event["message"]
    assert lists(proxy, namespace) >= 2, "a 503 is tried again until the deadline"


async def test_a_first_list_that_hangs_ends_at_its_deadline(
    proxy: FaultProxy, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SharedJobWatch, "first_list_deadline", 4.0)
    proxy.add(Rule(faultproxy.hang(), method="GET", path=jobs_path(namespace), watch=False))
    trigger = JobTrigger(kind="PyTorchJob", name="train", namespace=namespace, kubernetes_conn_id=TRIGGERER)
    event = await asyncio.wait_for(first_event(trigger), 30)
    assert event["status"] == "error"
    assert f"could not list pytorchjobs in namespace {namespace} within 4s" in event["message"]
    assert "no answer in time" in event["message"]
