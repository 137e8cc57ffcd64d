"""The shared client against a real cluster: submit, wait, fail with reasons, logs, suspend, resubmit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kubetrain.client import AsyncJobClient, JobClient, builders
from kubetrain.client.builders import JobSpec
from kubetrain.client.errors import InvalidJobError, JobExistsError, JobFailedError, JobTimeoutError
from tests.support import HANG, eventually, fails, pytorchjob, runs_for


@pytest.fixture
async def jobs_client(kubeconfig: Path) -> Any:
    async with await AsyncJobClient.connect(kubeconfig=str(kubeconfig)) as api:
        yield api


async def test_submit_and_wait_for_success(
    controller: Any, jobs_client: AsyncJobClient, namespace: str
) -> None:
    created = await jobs_client.create(
        pytorchjob("ok", workers=1, master_annotations=runs_for("2s"), worker_annotations=runs_for("2s")),
        namespace=namespace,
    )
    assert created["metadata"]["uid"]
    states = []
    done = await jobs_client.wait(
        "PyTorchJob",
        "ok",
        namespace,
        timeout=60,
        on_change=lambda job: states.append(job.get("status", {}).get("conditions", [{}])[-1].get("type")),
    )
    assert done["status"]["conditions"][-1]["type"] == "Succeeded"
    assert "Succeeded" in states


async def test_a_failed_job_raises_with_its_reason(
    controller: Any, jobs_client: AsyncJobClient, namespace: str
) -> None:
    await jobs_client.create(
        pytorchjob(
            "broken", workers=1, restart_policy="Never", master_annotations=HANG, worker_annotations=fails(3)
        ),
        namespace=namespace,
    )
    with pytest.raises(JobFailedError) as raised:
        await jobs_client.wait("PyTorchJob", "broken", namespace, timeout=60)
    assert raised.value.reason == "PyTorchJobFailed"
    assert "exited with code 3" in str(raised.value)


async def test_waiting_too_long_says_what_the_pods_wait_for(
    controller: Any, jobs_client: AsyncJobClient, namespace: str
) -> None:
    await jobs_client.create(
        pytorchjob("greedy", workers=1, gpus=64, master_annotations=HANG, worker_annotations=HANG),
        namespace=namespace,
    )
    await asyncio.sleep(2)  # let the scheduler try
    with pytest.raises(JobTimeoutError) as raised:
        await jobs_client.wait("PyTorchJob", "greedy", namespace, timeout=3)
    assert "Unschedulable" in str(raised.value) and "nvidia.com/gpu" in str(raised.value)


async def test_invalid_jobs_are_rejected_naming_the_field(
    controller: Any, jobs_client: AsyncJobClient, namespace: str
) -> None:
    bad = pytorchjob("bad")
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(InvalidJobError, match=r"spec.pytorchReplicaSpecs\[Master\].replicas must be 1"):
        await jobs_client.create(bad, namespace=namespace)
    worse = pytorchjob("worse")
    worse["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(InvalidJobError, match=r"spec\.pytorchReplicaSpecs\.Worker\.replicas"):
        await jobs_client.create(worse, namespace=namespace)
    await jobs_client.create(
        pytorchjob("twice", master_annotations=HANG, worker_annotations=HANG), namespace=namespace
    )
    with pytest.raises(JobExistsError):
        await jobs_client.create(pytorchjob("twice"), namespace=namespace)


async def test_dry_run_checks_without_creating(
    jobs_client: AsyncJobClient, namespace: str, crds: None
) -> None:
    await jobs_client.create(
        builders.pytorchjob(JobSpec(name="dry", image="img", command=["true"])),
        namespace=namespace,
        dry_run=True,
    )
    assert await jobs_client.get("PyTorchJob", "dry", namespace) is None


async def test_suspend_and_unsuspend(controller: Any, jobs_client: AsyncJobClient, namespace: str) -> None:
    await jobs_client.create(
        pytorchjob("pausable", workers=1, master_annotations=HANG, worker_annotations=HANG),
        namespace=namespace,
    )
    await jobs_client.set_suspended("PyTorchJob", "pausable", namespace, True)

    async def suspended() -> None:
        async for job in jobs_client.watch("PyTorchJob", "pausable", namespace, timeout=30):
            if any(
                c["type"] == "Suspended" and c["status"] == "True"
                for c in job.get("status", {}).get("conditions", [])
            ):
                return

    await suspended()
    job = await jobs_client.set_suspended("PyTorchJob", "pausable", namespace, False)
    assert job["spec"]["runPolicy"]["suspend"] is False


async def test_resubmit_keeps_the_checkpoint_dir_and_lineage(
    controller: Any, jobs_client: AsyncJobClient, namespace: str
) -> None:
    first = pytorchjob(
        "train",
        workers=1,
        restart_policy="Never",
        master_annotations=fails(1),
        worker_annotations=HANG,
        annotations={"kubetrain.dev/checkpoint-dir": "/ckpt"},
    )
    created = await jobs_client.create(first, namespace=namespace)
    with pytest.raises(JobFailedError):
        await jobs_client.wait("PyTorchJob", "train", namespace, timeout=60)
    second = await jobs_client.resubmit(created)
    meta = second["metadata"]
    assert meta["name"] == "train-a2"
    assert meta["labels"]["kubetrain.dev/lineage"] == "train"
    assert meta["annotations"]["kubetrain.dev/attempt"] == "2"
    assert meta["annotations"]["kubetrain.dev/checkpoint-dir"] == "/ckpt"
    third = await jobs_client.resubmit(second)
    assert (
        third["metadata"]["name"] == "train-a3"
        and third["metadata"]["labels"]["kubetrain.dev/lineage"] == "train"
    )


async def test_list_spans_every_installed_kind(
    controller: Any, jobs_client: AsyncJobClient, namespace: str
) -> None:
    await jobs_client.create(
        pytorchjob("one", master_annotations=HANG, worker_annotations=HANG), namespace=namespace
    )
    await jobs_client.create(
        builders.trainjob(JobSpec(name="two", image="img"), runtime="torch-distributed"), namespace=namespace
    )
    listed = await jobs_client.list(namespace=namespace)
    assert sorted((j["kind"], j["metadata"]["name"]) for j in listed) == [
        ("PyTorchJob", "one"),
        ("TrainJob", "two"),
    ]


def test_the_sync_client_has_the_same_verbs(kubeconfig: Path, namespace: str, crds: None) -> None:
    with JobClient.connect(kubeconfig=str(kubeconfig)) as sync:
        sync.create(pytorchjob("sync", master_annotations=HANG, worker_annotations=HANG), namespace=namespace)
        assert sync.get("PyTorchJob", "sync", namespace)["metadata"]["name"] == "sync"  # type: ignore[index]
        first = next(sync.watch("PyTorchJob", "sync", namespace, timeout=10))
        assert first["metadata"]["name"] == "sync"
        assert sync.delete("PyTorchJob", "sync", namespace) is True
        assert sync.delete("PyTorchJob", "sync", namespace) in (True, False)


HOLD = "example.com/hold"  # keeps an evicted pod readable until the test lets it go


async def test_a_pod_the_cluster_evicts_tells_why_and_any_other_pod_tells_nothing(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    core = jobs_client.core
    pod = {
        "metadata": {"name": "step", "finalizers": [HOLD]},
        "spec": {"containers": [{"name": "main", "image": "example.com/step:1"}]},
    }
    await core.create_namespaced_pod(namespace, pod)
    try:
        assert await jobs_client.disruption(namespace, "step") is None
        # What `kubectl drain` and the scheduler's preemption do: the API server marks the pod first.
        eviction = {"metadata": {"name": "step", "namespace": namespace}}
        await core.create_namespaced_pod_eviction("step", namespace, eviction)
        why = await eventually(lambda: jobs_client.disruption(namespace, "step"), what="the DisruptionTarget")
        assert why.startswith("EvictionByEvictionAPI"), why
    finally:
        await core.patch_namespaced_pod("step", namespace, [{"op": "remove", "path": "/metadata/finalizers"}])
    assert await jobs_client.disruption(namespace, "no-such-pod") is None
