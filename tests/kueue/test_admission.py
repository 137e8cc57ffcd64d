"""Kueue admits kubetrain's jobs: a queued job is created suspended and gets no pods until its
ClusterQueue has quota; at admission the flavor's node labels and tolerations reach every pod, and
the job's clock (``startTime``) starts then, not at creation."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from kubetrain import naming
from kubetrain.client import AsyncJobClient, builders, kinds
from tests.support import HANG, Jobs, condition, eventually, pytorchjob, runs_for

FLAVOR_SELECTOR = {"node.kubernetes.io/instance-type": "kwok-gpu"}
FLAVOR_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def queued(job: dict[str, Any], queue: str = "gpus", priority: str | None = None) -> dict[str, Any]:
    """``job`` labelled for a LocalQueue (and a WorkloadPriorityClass)."""
    labels = job["metadata"].setdefault("labels", {})
    labels[naming.LABEL_KUEUE_QUEUE_NAME] = queue
    if priority:
        labels[naming.LABEL_KUEUE_PRIORITY_CLASS] = priority
    return job


def gpu_job(name: str, *, gpus_per_pod: int, annotations: dict[str, str], **options: Any) -> dict[str, Any]:
    """A Master and a Worker asking for ``gpus_per_pod`` GPUs each, behaving as ``annotations`` say."""
    return pytorchjob(
        name,
        workers=1,
        gpus=gpus_per_pod,
        master_annotations=annotations,
        worker_annotations=annotations,
        **options,
    )


def _tolerations(pod: Any) -> list[dict[str, str]]:
    return [{"key": t.key, "operator": t.operator, "effect": t.effect} for t in pod.spec.tolerations or []]


def _time(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def _still_without_pods(jobs: Jobs, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert await jobs.pods(name) == [], f"{name} got pods while Kueue held it"
        job = await jobs.get(name)
        assert job is not None and job["spec"]["runPolicy"]["suspend"] is True
        await asyncio.sleep(0.5)


async def test_a_queued_job_waits_for_quota_then_runs_on_the_flavor(
    controller: Any, jobs: Jobs, queues: str
) -> None:
    first = await jobs.create(queued(gpu_job("first", gpus_per_pod=8, annotations=runs_for("8s"))))
    assert first["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook suspended it at creation
    await jobs.wait_pods("first", 2, phase="Running", timeout=60)

    second = await jobs.create(queued(gpu_job("second", gpus_per_pod=4, annotations=HANG)))
    assert second["spec"]["runPolicy"]["suspend"] is True
    await _still_without_pods(jobs, "second", 4)  # 16 GPUs of quota, all in use by the first
    held = await jobs.get("second")
    assert held is not None and "startTime" not in (held.get("status") or {})

    await jobs.wait_condition("first", "Succeeded", timeout=60)
    freed = dt.datetime.now(dt.UTC)
    pods = await jobs.wait_pods("second", 2, timeout=60)
    for pod in pods:
        assert pod.spec.node_selector == FLAVOR_SELECTOR
        assert FLAVOR_TOLERATION in _tolerations(pod)
    running = await jobs.wait_condition("second", "Running", timeout=30)
    assert _time(running["status"]["startTime"]) >= freed.replace(microsecond=0) - dt.timedelta(seconds=1)
    assert _time(running["status"]["startTime"]) > _time(second["metadata"]["creationTimestamp"])
    assert condition(running, "Created")["status"] == "True"


async def _quota_free(custom: client.CustomObjectsApi, queue: str) -> bool:
    """Whether the ClusterQueue holds quota for no Workload (an earlier test's jobs may still be
    going away with their namespace: the quota is the cluster's)."""
    found = await custom.get_cluster_custom_object(naming.KUEUE_GROUP, "v1beta2", "clusterqueues", queue)
    return not (found.get("status") or {}).get("reservingWorkloads")


async def test_a_queued_job_says_why_kueue_holds_it_until_admitted(
    controller: Any, jobs: Jobs, queues: str, kubeconfig: Path, custom: client.CustomObjectsApi
) -> None:
    # What the Airflow operators and KFP launchers log while a job waits in its queue.
    await eventually(lambda: _quota_free(custom, "gpus"), timeout=90, what="the gpus quota to be free")
    await jobs.create(queued(gpu_job("first", gpus_per_pod=8, annotations=HANG)))
    await jobs.wait_pods("first", 2, phase="Running", timeout=60)
    second = gpu_job("second", gpus_per_pod=4, annotations=HANG)
    second["metadata"].setdefault("labels", {}).update(builders.queue_labels("gpus", None))
    await jobs.create(second)

    async with await AsyncJobClient.connect(kubeconfig=str(kubeconfig)) as api:

        async def reason() -> tuple[dict[str, Any], str] | None:
            job = await jobs.get("second")
            waiting = await api.admission_wait(job) if job else None
            return (job, waiting) if job and waiting else None

        held, waiting = await eventually(reason, timeout=30, what="Kueue's reason for holding the job")
        assert "insufficient" in waiting and naming.GPU_RESOURCE in waiting, waiting
        # The local cluster serves no visibility API (docs/kueue.md): the line goes on without a position.
        assert not waiting.startswith("position"), waiting
        assert f"queued in LocalQueue gpus: {waiting}" in kinds.status_line(held, waiting=waiting)

        await jobs.delete("first")
        await jobs.wait_pods("second", 2, timeout=60)
        admitted = await jobs.get("second")
        assert admitted is not None and await api.admission_wait(admitted) is None
        assert "queued" not in kinds.status_line(admitted)
