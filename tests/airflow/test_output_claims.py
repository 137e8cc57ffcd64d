"""Outputs that outlive their job: ``on_finish_action`` never deletes the claim a result points at.

A TrainJob owns the claims of its runtime's ``volumeClaimPolicies`` unless they are retained
(``whenDeleted: Retain``): deleting the TrainJob deletes them. A task that deletes its TrainJob when it
finishes, while its result names a checkpoint on such a claim, would hand downstream tasks a path that
no longer exists. The operator refuses before submitting when the checkpoint dir shows it, and before
deleting when the reported checkpoint does.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from kubetrain.operators import TrainJobOperator
from kubetrain.operators.compat import AirflowException
from kubetrain.operators.operators import trainer_claim_mounts
from kubetrain.trainjob.outputs import (
    ClaimMount,
    holding_claim,
    output_deleted_with_job,
    output_paths,
)
from tests.airflow import support
from tests.support import Jobs, claims_runtime, eventually, trainjob

REPO = Path(__file__).resolve().parents[2]


def shipped(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "runtimes" / f"{name}.yaml").read_text())
    return loaded


def tune_job(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    job = trainjob("tune", "torchtune-llama3.2-1b", kind="ClusterTrainingRuntime", annotations=annotations)
    job["metadata"]["namespace"] = "team"
    return job


# -- the decision, without a cluster ---------------------------------------------------------------------
def test_the_shipped_torchtune_runtime_keeps_the_model_and_lets_the_downloads_go() -> None:
    mounts = trainer_claim_mounts(tune_job(), shipped("torchtune-llama3.2-1b"))
    assert holding_claim("/workspace/output/epoch_0", mounts) == ClaimMount(
        "/workspace/output", "output-tune", False
    )
    assert holding_claim("/workspace/model", mounts) == ClaimMount("/workspace", "initializer-tune", True)
    assert output_deleted_with_job(["/workspace/output/epoch_0"], mounts) is None
    assert output_deleted_with_job(["/workspace/model"], mounts) == ("/workspace/model", "initializer-tune")


def test_a_runtime_that_deletes_its_output_claim_is_seen() -> None:
    runtime = shipped("torchtune-llama3.2-1b")
    for policy in runtime["spec"]["template"]["spec"]["volumeClaimPolicies"]:
        policy.pop("retentionPolicy", None)  # as upstream ships them: every claim deleted with the TrainJob
    mounts = trainer_claim_mounts(tune_job(), runtime)
    assert output_deleted_with_job(["/workspace/output/epoch_0"], mounts) == (
        "/workspace/output/epoch_0",
        "output-tune",
    )


def test_a_checkpoint_volume_of_ones_own_is_never_deleted_with_the_job() -> None:
    job = tune_job(
        {
            "kubetrain.dev/checkpoint-dir": "/workspace/ckpt",
            "kubetrain.dev/checkpoint-volume": "my-checkpoints",
        }
    )
    runtime = copy.deepcopy(shipped("torchtune-llama3.2-1b"))
    mounts = trainer_claim_mounts(job, runtime)
    assert holding_claim("/workspace/ckpt/step-10", mounts) == ClaimMount(
        "/workspace/ckpt", "my-checkpoints", False
    )
    assert output_deleted_with_job(output_paths(job), mounts) is None


def test_the_outputs_are_the_reported_checkpoint_then_the_checkpoint_dir() -> None:
    job = tune_job(
        {
            "kubetrain.dev/checkpoint-dir": "/workspace/output",
            "kubetrain.dev/last-checkpoint": "/workspace/output/step-40",
            "kubetrain.dev/training-report": '{"last_checkpoint": "/workspace/output/step-40"}',
        }
    )
    assert output_paths(job) == ["/workspace/output/step-40", "/workspace/output"]
    assert output_paths(tune_job()) == []


# -- on the cluster --------------------------------------------------------------------------------------


def execute(op: TrainJobOperator) -> Any:
    return support.execute(op, support.task_context(task_id="tune"))


async def refusal(op: TrainJobOperator, custom: client.CustomObjectsApi, namespace: str) -> str:
    """Why the task fails before submitting anything."""
    with pytest.raises(AirflowException) as refused:
        await asyncio.to_thread(execute, op)
    listed = await custom.list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
    )
    assert listed["items"] == [], "nothing was submitted"
    return str(refused.value)


async def claims(core: client.CoreV1Api, namespace: str) -> dict[str, bool]:
    """Each claim in the namespace, and whether something owns it (will delete it)."""
    listed = await core.list_namespaced_persistent_volume_claim(namespace)
    return {
        c.metadata.name: bool(c.metadata.owner_references)
        for c in listed.items
        if c.metadata.deletion_timestamp is None
    }


@pytest.mark.parametrize(
    ("on_finish_action", "ttl", "deleter", "fix"),
    [
        ("delete", None, "on_finish_action='delete'", "set on_finish_action='keep'"),
        ("keep", "600", "kubetrain.dev/ttl-seconds-after-finished: 600", "remove the TTL"),
    ],
    ids=["delete-on-finish", "ttl"],
)
@pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "crds")
async def test_a_deletion_that_would_delete_the_checkpoints_is_refused_before_submitting(
    namespace: str,
    custom: client.CustomObjectsApi,
    jobs: Jobs,
    on_finish_action: str,
    ttl: str | None,
    deleter: str,
    fix: str,
) -> None:
    await jobs.create(claims_runtime("deletes-output", output_retained=False))
    annotations = {"kubetrain.dev/checkpoint-dir": "/workspace/output"}
    if ttl is not None:
        annotations["kubetrain.dev/ttl-seconds-after-finished"] = ttl
    op = TrainJobOperator(
        task_id="tune",
        namespace=namespace,
        job=trainjob("tune", "deletes-output", annotations=annotations),
        on_finish_action=on_finish_action,
        get_logs=False,
    )
    assert await refusal(op, custom, namespace) == (
        f"{deleter} would delete TrainJob tune and with it the claim output-tune, which holds "
        "/workspace/output: the runtime's volumeClaimPolicies delete that claim with the TrainJob "
        "(retentionPolicy.whenDeleted: Delete). Run on a runtime that retains it (whenDeleted: Retain, as the "
        f"shipped torchtune runtimes do for their output claim), or {fix}; nothing was submitted"
    )


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "controller_process")
async def test_the_delete_after_finishing_is_refused_when_the_reported_checkpoint_is_on_the_jobs_claim(
    namespace: str, custom: client.CustomObjectsApi, core: client.CoreV1Api, jobs: Jobs
) -> None:
    runtime = claims_runtime("deletes-output", output_retained=False, trains_for="4s")
    await jobs.create(runtime)
    # Nothing declared a checkpoint dir, so nothing could be refused before submitting.
    op = TrainJobOperator(
        task_id="tune",
        namespace=namespace,
        job=trainjob("tune", "deletes-output"),
        on_finish_action="delete",
        get_logs=False,
        status_interval=1,
    )
    running = asyncio.ensure_future(asyncio.to_thread(execute, op))

    async def submitted() -> bool:
        listed = await custom.list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
        )
        return bool(listed["items"])

    await eventually(submitted, timeout=30, what="the TrainJob to be submitted")
    # While it trains, it reports a checkpoint on the TrainJob's own claim (the controller records the
    # report on the TrainJob this way).
    reported = {"metadata": {"annotations": {"kubetrain.dev/last-checkpoint": "/workspace/output/step-10"}}}
    await jobs.patch("tune", reported, kind="TrainJob")
    with pytest.raises(
        AirflowException,
        match=r"claim output-tune, which holds /workspace/output/step-10: .*; the TrainJob was kept$",
    ):
        await asyncio.wait_for(running, 120)
    kept = await custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "tune"
    )
    assert kept["metadata"].get("deletionTimestamp") is None
    assert (await claims(core, namespace))["output-tune"] is True


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "controller_process")
async def test_a_retained_output_claim_outlives_the_trainjob_the_task_deletes(
    namespace: str, custom: client.CustomObjectsApi, core: client.CoreV1Api, jobs: Jobs
) -> None:
    runtime = claims_runtime("keeps-output", output_retained=True)
    await jobs.create(runtime)
    job = trainjob(
        "tune",
        "keeps-output",
        annotations={
            "kubetrain.dev/checkpoint-dir": "/workspace/output",
            "kubetrain.dev/last-checkpoint": "/workspace/output/step-10",
        },
    )
    op = TrainJobOperator(
        task_id="tune",
        namespace=namespace,
        job=job,
        on_finish_action="delete",
        get_logs=False,
        status_interval=1,
    )
    result = await asyncio.to_thread(execute, op)
    assert result["state"] == "Succeeded" and result["last_checkpoint"] == "/workspace/output/step-10"

    async def trainjob_and_downloads_gone() -> bool:
        listed = await custom.list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
        )
        return not listed["items"] and "scratch-tune" not in await claims(core, namespace)

    await eventually(trainjob_and_downloads_gone, timeout=60, what="the TrainJob and its scratch claim to go")
    assert await claims(core, namespace) == {"output-tune": False}, "the model's claim stays, owned by nobody"
