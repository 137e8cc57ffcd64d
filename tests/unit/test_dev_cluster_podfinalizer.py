"""The simulated kubelet's last delete: a removal that fails, however it fails, is tried again."""

from __future__ import annotations

import asyncio

import pytest

from kubetrain.devcluster import podfinalizer
from kubetrain.devcluster.podfinalizer import PodFinalizer, awaiting_removal
from kubetrain.kube.client import KubeClient


@pytest.mark.parametrize("failure", [RuntimeError("a bug in a client layer"), ValueError("bad JSON")])
async def test_a_removal_that_fails_unexpectedly_is_retried_and_the_worker_goes_on(
    monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    monkeypatch.setattr(podfinalizer, "RETRY_SECONDS", 0.01)
    finalizer = PodFinalizer(KubeClient.__new__(KubeClient))  # never called: ``remove`` is replaced
    calls: list[tuple[str, str, str]] = []

    async def remove(namespace: str, name: str, uid: str) -> None:
        calls.append((namespace, name, uid))
        if len(calls) == 1:
            raise failure

    finalizer.remove = remove  # type: ignore[method-assign]
    terminating = {"metadata": {"namespace": "ns", "name": "p", "uid": "u1", "deletionTimestamp": "t"}}
    finalizer._enqueue(awaiting_removal(terminating))
    worker = asyncio.create_task(finalizer._work())
    try:
        for _ in range(200):
            if len(calls) == 2:
                break
            await asyncio.sleep(0.01)
    finally:
        worker.cancel()
    assert calls == [("ns", "p", "u1")] * 2
    finalizer._enqueue(awaiting_removal(terminating))
    assert finalizer._queue.qsize() == 1  # the removed pod's uid no longer counts as queued


def test_only_a_terminating_pod_awaits_removal() -> None:
    meta = {"namespace": "ns", "name": "p", "uid": "u1"}
    assert awaiting_removal(None) is None
    assert awaiting_removal({"metadata": meta}) is None
    assert awaiting_removal({"metadata": {**meta, "deletionTimestamp": "t"}}) == ("ns", "p", "u1")
