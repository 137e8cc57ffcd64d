"""Kueue's all-or-nothing admission (``waitForPodsReady``): a job that is not Running within the
timeout after admission is evicted and requeued. kubetrain takes the eviction as a suspension (its
pods go, no failure is counted) and runs the job again when Kueue re-admits it."""

from __future__ import annotations

from typing import Any

from kubetrain.devcluster.cluster import DevCluster
from tests.kueue.test_admission import queued
from tests.support import HANG, Jobs, eventually, pytorchjob

# kwok keeps the pod Pending. Kueue's kubeflow integration takes a job's pods for ready once it is
# Running, which a PyTorchJob is as soon as its Master runs (as upstream): so the Master never starts.
NEVER_STARTS = {"sim.kubetrain.dev/start-delay": "1h"}


async def _requeued(jobs: Jobs) -> int | None:
    listed = await jobs.custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", jobs.namespace, "workloads"
    )
    counts = [((w.get("status") or {}).get("requeueState") or {}).get("count", 0) for w in listed["items"]]
    return max(counts, default=0) or None


async def test_a_job_whose_pods_do_not_all_start_is_evicted_and_requeued(
    controller: Any, jobs: Jobs, queues: str, dev_cluster: DevCluster
) -> None:
    state = dev_cluster.load_state()
    assert state is not None
    timeout = state.options["kueue_pods_ready_timeout"]
    stuck = pytorchjob("stuck", workers=1, gpus=1, master_annotations=NEVER_STARTS, worker_annotations=HANG)
    await jobs.create(queued(stuck))
    await jobs.wait_pods("stuck", 2, timeout=60)

    await jobs.wait_condition("stuck", "Suspended", timeout=timeout + 60)  # evicted by Kueue
    count = await eventually(lambda: _requeued(jobs), timeout=60, what="Kueue to requeue the Workload")
    assert count >= 1
    resumed = await jobs.wait_condition("stuck", "Suspended", status="False", timeout=120)
    await jobs.wait_pods("stuck", 2, timeout=60)  # admitted again, pods again
    assert not any(c["type"] == "Failed" for c in resumed["status"]["conditions"])
    reasons = {reason for _, reason, _ in await jobs.events("stuck")}
    assert {"PyTorchJobSuspended", "PyTorchJobResumed"} <= reasons
