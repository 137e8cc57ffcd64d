"""The lineage lifecycle against a real API server: each run gets its own job, whatever its labels say.

No controller runs here: a job's state is what the test writes into its status (as the controller
would), so every case sets up exactly the attempts it is about. The requests are built as the
callers build them: the KFP launcher's own ``LaunchRequest``, and the Airflow operator's identity.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain import naming
from kubetrain.client import AsyncJobClient, kinds, lineage
from kubetrain.client.errors import LineageError
from kubetrain.client.lineage import Action, Identity
from kubetrain.components.launch import LaunchRequest
from tests.support import HANG, pytorchjob

pytestmark = pytest.mark.usefixtures("crds")
Obj = dict[str, Any]


@pytest.fixture
async def jobs_client(kubeconfig: Path) -> AsyncIterator[AsyncJobClient]:
    async with await AsyncJobClient.connect(kubeconfig=str(kubeconfig)) as api:
        yield api


async def set_finalizers(client: AsyncJobClient, job: Obj, finalizers: list[str] | None) -> None:
    """Set (None: remove) a PyTorchJob's finalizers."""
    await client.custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        job["metadata"]["namespace"],
        "pytorchjobs",
        job["metadata"]["name"],
        {"metadata": {"finalizers": finalizers}},
        _content_type="application/merge-patch+json",
    )


async def set_state(client: AsyncJobClient, job: Obj, state: str) -> None:
    """Write the condition the controller would write when the job reaches ``state``."""
    spec = kinds.kind_of(job["kind"])
    condition = {"type": state, "status": "True", "reason": f"Test{state}", "message": f"set to {state}"}
    await client.custom.patch_namespaced_custom_object_status(
        spec.group,
        spec.version,
        job["metadata"]["namespace"],
        spec.plural,
        job["metadata"]["name"],
        {"status": {"conditions": [condition]}},
        _content_type="application/merge-patch+json",
    )


def airflow_request(namespace: str, task_id: str, run_id: str, *, name: str) -> lineage.Request:
    """What the operator asks for: its task instance's identity, its manifest under its derived name,
    carrying the readable labels (which collide for the ids these tests use)."""
    manifest = pytorchjob(name, workers=0, master_annotations=HANG)
    manifest["metadata"]["labels"] = {
        naming.LABEL_DAG_ID: "nightly",
        naming.LABEL_TASK_ID: naming.label_value(task_id),
        naming.LABEL_RUN_ID: naming.label_value(run_id),
        naming.LABEL_MAP_INDEX: "none",
        naming.LABEL_LINEAGE: name,
    }
    return lineage.Request(
        identity=Identity.airflow("nightly", task_id, run_id, -1),
        kind="PyTorchJob",
        namespace=namespace,
        base_lineage=name,
        spec_hash=lineage.spec_hash(manifest),
        template=manifest,
        first_name=name,
    )


def kfp_step(namespace: str, **inputs: Any) -> lineage.Request:
    request = LaunchRequest(kind="PyTorchJob", image="example.com/train:1", num_workers=0, **inputs)
    request.check()
    return request.lineage_request(namespace)


async def prepare(client: AsyncJobClient, request: lineage.Request, **options: Any) -> lineage.Prepared:
    return await client.prepare_attempt(request, log=lambda line: None, **options)


async def names(client: AsyncJobClient, namespace: str) -> list[str]:
    return sorted(j["metadata"]["name"] for j in await client.list(kind="PyTorchJob", namespace=namespace))


async def test_tasks_whose_readable_labels_collide_never_share_jobs(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    # CJK task ids both become "" as label values; these run ids differ only in ':' and '+'.
    cases = [
        ("训练", "manual__2026-01-01T00:00:00+00:00", "job-1a1a1a1a"),
        ("評価", "manual__2026-01-01T00:00:00+00:00", "job-2b2b2b2b"),
        ("评估", "manual__2026-01-01T00_00_00_00_00", "job-3c3c3c3c"),
    ]
    requests = [airflow_request(namespace, task, run, name=name) for task, run, name in cases]
    people = (naming.LABEL_DAG_ID, naming.LABEL_TASK_ID, naming.LABEL_RUN_ID, naming.LABEL_MAP_INDEX)
    readable = {tuple(r.template["metadata"]["labels"][k] for k in people) for r in requests}
    assert len(readable) == 1, "the readable labels of the three tasks are the same"
    first = [await prepare(jobs_client, r) for r in requests]
    assert [p.decision.action for p in first] == [Action.START] * 3
    assert [p.job["metadata"]["name"] for p in first] == [name for _, _, name in cases]
    # The first task fails and retries: it resubmits its own job, and only its own.
    await set_state(jobs_client, first[0].job, "Failed")
    retried = await prepare(jobs_client, requests[0])
    assert (retried.decision.action, retried.job["metadata"]["name"]) == (Action.RESUBMIT, "job-1a1a1a1a-a2")
    # The others, retried while theirs run, reattach to their own.
    for request, earlier in zip(requests[1:], first[1:], strict=True):
        again = await prepare(jobs_client, request)
        assert again.decision.action is Action.REATTACH
        assert again.job["metadata"]["uid"] == earlier.job["metadata"]["uid"]
    assert await names(jobs_client, namespace) == [
        "job-1a1a1a1a",
        "job-1a1a1a1a-a2",
        "job-2b2b2b2b",
        "job-3c3c3c3c",
    ]


async def test_a_retried_kfp_step_without_a_job_name_finds_its_own_job(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    step = {"run_id": "0d7c0c1e-run-1", "task_name": "pytorchjob-launcher"}
    first = await prepare(jobs_client, kfp_step(namespace, **step))
    assert first.decision.action is Action.START
    assert first.job["metadata"]["name"].startswith("pytorchjob-launcher-")
    # Preempted while running: the retried step waits for the same job, it does not start another.
    again = await prepare(jobs_client, kfp_step(namespace, **step))
    assert (again.decision.action, again.job["metadata"]["uid"]) == (
        Action.REATTACH,
        first.job["metadata"]["uid"],
    )
    await set_state(jobs_client, first.job, "Failed")
    retried = await prepare(jobs_client, kfp_step(namespace, **step))
    assert retried.decision.action is Action.RESUBMIT
    assert retried.job["metadata"]["name"] == first.job["metadata"]["name"].removesuffix("-a1") + "-a2"
    # Another task of the same run is another step, with a job of its own.
    other = await prepare(jobs_client, kfp_step(namespace, **{**step, "task_name": "pytorchjob-launcher-2"}))
    assert other.decision.action is Action.START
    assert len(await names(jobs_client, namespace)) == 3


async def test_a_new_pipeline_run_with_the_same_job_name_gets_a_new_job(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    old = await prepare(jobs_client, kfp_step(namespace, job_name="digits", run_id="run-1", task_name="t"))
    await set_state(jobs_client, old.job, "Succeeded")
    new = await prepare(jobs_client, kfp_step(namespace, job_name="digits", run_id="run-2", task_name="t"))
    assert new.decision.action is Action.START, "the new run does not report the old run's result"
    assert new.job["metadata"]["name"] != old.job["metadata"]["name"]
    assert new.job["metadata"]["name"].startswith("digits-") and new.job["metadata"]["name"].endswith("-a1")
    # The same run again reports its own result; changed inputs are a lineage of their own.
    same = await prepare(jobs_client, kfp_step(namespace, job_name="digits", run_id="run-1", task_name="t"))
    assert (same.decision.action, same.job["metadata"]["uid"]) == (
        Action.REATTACH,
        old.job["metadata"]["uid"],
    )
    changed = await prepare(
        jobs_client, kfp_step(namespace, job_name="digits", run_id="run-1", task_name="t", args=["--lr=0.1"])
    )
    assert changed.decision.action is Action.START and "ran another spec" in changed.decision.reason
    assert len(await names(jobs_client, namespace)) == 3


async def test_changed_inputs_never_train_beside_a_running_attempt_on_the_same_checkpoints(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    step = {"job_name": "digits", "run_id": "run-1", "task_name": "t", "checkpoint_dir": "/ckpt"}
    old = await prepare(jobs_client, kfp_step(namespace, **step, checkpoint_volume="shared"))
    with pytest.raises(LineageError, match="runs another spec and is Pending, writing checkpoints to /ckpt"):
        await prepare(jobs_client, kfp_step(namespace, **step, checkpoint_volume="shared", args=["--lr=0.1"]))
    # Elsewhere, it may start at once; once the old one failed, also in the same place.
    apart = await prepare(
        jobs_client, kfp_step(namespace, **step, checkpoint_volume="other", args=["--lr=1"])
    )
    assert apart.decision.action is Action.START
    await set_state(jobs_client, old.job, "Failed")
    changed = await prepare(
        jobs_client, kfp_step(namespace, **step, checkpoint_volume="shared", args=["--lr=0.1"])
    )
    assert changed.decision.action is Action.START and "ran another spec" in changed.decision.reason


async def test_nothing_is_resubmitted_while_a_failed_attempts_pods_live(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    request = airflow_request(namespace, "train", "manual__1", name="train-5e5e5e5e")
    first = (await prepare(jobs_client, request)).job
    await set_state(jobs_client, first, "Failed")
    # A pod of the failed attempt that cannot be scheduled: Pending, i.e. live, until deleted.
    pod = {
        "metadata": {
            "name": "train-5e5e5e5e-master-0",
            "labels": {naming.LABEL_JOB_NAME: "train-5e5e5e5e"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "train-5e5e5e5e",
                    "uid": first["metadata"]["uid"],
                }
            ],
        },
        "spec": {
            "nodeSelector": {"kubetrain.dev/no-such-node": "true"},
            "containers": [{"name": "pytorch", "image": "example.com/train:1"}],
        },
    }
    await jobs_client.core.create_namespaced_pod(namespace, pod)
    with pytest.raises(LineageError) as refused:
        await prepare(jobs_client, request, pod_wait=0)
    assert refused.value.action == "wait" and refused.value.pods == ("train-5e5e5e5e-master-0 (Pending)",)
    assert "train-5e5e5e5e-master-0 (Pending)" in str(refused.value)
    assert await names(jobs_client, namespace) == ["train-5e5e5e5e"], "nothing was submitted"
    # Waiting: a status line names the pod; once it is gone the next attempt is submitted.
    lines: list[str] = []
    waiting = asyncio.Event()

    def log(line: str) -> None:
        lines.append(line)
        waiting.set()

    task = asyncio.create_task(jobs_client.prepare_attempt(request, log=log, pod_wait=120))
    await asyncio.wait_for(waiting.wait(), 30)
    assert "waiting for the pods of earlier attempts" in lines[0] and "master-0 (Pending)" in lines[0]
    assert await names(jobs_client, namespace) == ["train-5e5e5e5e"]
    await jobs_client.core.delete_namespaced_pod("train-5e5e5e5e-master-0", namespace, grace_period_seconds=0)
    resubmitted = await asyncio.wait_for(task, 60)
    assert resubmitted.decision.action is Action.RESUBMIT
    assert resubmitted.job["metadata"]["name"] == "train-5e5e5e5e-a2"


async def test_an_attempt_being_deleted_is_skipped_and_a_suspended_one_resumed(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    request = airflow_request(namespace, "train", "manual__2", name="train-6f6f6f6f")
    first = (await prepare(jobs_client, request)).job
    await set_finalizers(jobs_client, first, ["kubetrain.dev/test-hold"])  # keeps it "being deleted"
    try:
        await jobs_client.delete("PyTorchJob", first["metadata"]["name"], namespace, propagation="Background")
        second = await prepare(jobs_client, request)
        assert second.decision.action is Action.START and "being deleted" in second.decision.reason
        assert (second.job["metadata"]["name"], lineage.attempt_of(second.job)) == ("train-6f6f6f6f-a2", 2)
        # The task is killed with on_kill_action=suspend; its next try resumes that job.
        await jobs_client.set_suspended("PyTorchJob", "train-6f6f6f6f-a2", namespace, True)
        resumed = await prepare(jobs_client, request)
        assert (resumed.decision.action, resumed.job["metadata"]["name"]) == (
            Action.RESUME,
            "train-6f6f6f6f-a2",
        )
        assert resumed.job["spec"]["runPolicy"]["suspend"] is False
    finally:
        await set_finalizers(jobs_client, first, None)


async def test_a_job_of_the_same_name_that_belongs_to_another_run_is_never_taken_over(
    jobs_client: AsyncJobClient, namespace: str
) -> None:
    ours = airflow_request(namespace, "train", "manual__3", name="train-7a7a7a7a")
    # Another run's job that happens to carry our name and even our identity hash label.
    stranger = lineage.attempt_manifest(
        ours.template,
        identity=Identity.airflow("nightly", "train", "manual__4", -1),
        lineage="train-7a7a7a7a",
        number=1,
        name="train-7a7a7a7a",
        namespace=namespace,
        spec=ours.spec_hash,
        labels={naming.LABEL_IDENTITY_HASH: ours.identity.hash},
    )
    created = await jobs_client.create(stranger)
    await set_state(jobs_client, created, "Failed")
    with pytest.raises(LineageError, match="belongs to another run"):
        await prepare(jobs_client, ours)
    assert await names(jobs_client, namespace) == ["train-7a7a7a7a"], "its job was not resubmitted"
    kept = await jobs_client.require("PyTorchJob", "train-7a7a7a7a", namespace)
    assert kept["metadata"]["uid"] == created["metadata"]["uid"]
