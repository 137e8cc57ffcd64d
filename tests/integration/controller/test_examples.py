"""The example manifests, applied as they are, run to Succeeded with their lifecycle in Events and metrics."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import REPO, Kubectl
from tests.support import Jobs, eventually, metric


@pytest.mark.parametrize(
    ("manifest", "name", "pods"),
    [
        ("pytorchjob-gpu-workers.yaml", "mnist-gpu", 3),
        ("pytorchjob-elastic.yaml", "elastic-imagenet", 2),
    ],
)
async def test_an_example_runs_to_success(
    controller: Any, jobs: Jobs, kubectl: Kubectl, namespace: str, manifest: str, name: str, pods: int
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / manifest))
    await jobs.wait_pods(name, pods)
    job = await jobs.wait_condition(name, "Succeeded", timeout=60)
    assert job["status"]["conditions"][-1]["reason"] == "PyTorchJobSucceeded"

    async def lifecycle() -> set[str] | None:
        reasons = {reason for _, reason, _ in await jobs.events(name)}
        return (
            reasons
            if {"PyTorchJobCreated", "SuccessfulCreatePod", "PyTorchJobSucceeded"} <= reasons
            else None
        )

    await eventually(lifecycle, what=f"the lifecycle Events of {name}")
    labels = {"job_namespace": namespace, "framework": "pytorch"}
    assert metric("training_operator_jobs_created_total", **labels) == 1
    assert metric("training_operator_jobs_successful_total", **labels) == 1
    listed = kubectl("get", "pytorchjob", name, "-n", namespace).stdout
    assert "Succeeded" in listed.splitlines()[1]
