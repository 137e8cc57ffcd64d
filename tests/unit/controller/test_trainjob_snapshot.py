"""The TrainJob reconciler parses a runtime snapshot once per version of it, and forgets it with the job."""

from __future__ import annotations

from typing import Any

from kubetrain.controller.core.skeleton import Settings
from kubetrain.controller.trainjob.reconciler import TrainJobReconciler
from kubetrain.kube.expectations import Expectations


def reconciler() -> TrainJobReconciler:
    unused: Any = None  # no pass runs: only the snapshot parsing and the job handler are exercised
    return TrainJobReconciler(
        kube=unused,
        jobs=unused,
        runtimes=unused,
        cluster_runtimes=unused,
        snapshots=unused,
        pods=unused,
        services=unused,
        expectations=Expectations(),
        recorder=unused,
        settings=Settings(),
    )


def snapshot(version: str, runtime: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "tj-runtime-snapshot", "resourceVersion": version},
        "data": {"runtime": runtime},
    }


def test_a_snapshot_is_parsed_again_only_when_its_resource_version_changes() -> None:
    tj = reconciler()
    first = tj._snapshot_runtime("ns/tj", snapshot("7", "kind: TrainingRuntime\n"))
    assert tj._snapshot_runtime("ns/tj", snapshot("7", "kind: TrainingRuntime\n")) is first
    edited = tj._snapshot_runtime("ns/tj", snapshot("8", "kind: ClusterTrainingRuntime\n"))
    assert edited == {"kind": "ClusterTrainingRuntime"}
    tj.job_handler(lambda _: None)({"metadata": {"name": "tj", "namespace": "ns"}}, None)
    assert tj._snapshot_runtime("ns/tj", snapshot("8", "kind: ClusterTrainingRuntime\n")) is not edited
