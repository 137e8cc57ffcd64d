"""What a deferred task leaves in Airflow's metadata database: no credentials, no job spec.

Airflow stores a trigger's kwargs (and prints them in the triggerer's log) and stores the trigger's
event for ``execute_complete``. The kwargs name the cluster by connection id; the triggerer reads the
connection itself. The event carries the job's identity and status; a spec's ``env`` (tokens, keys)
never leaves the cluster.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kubetrain.operators import JobTrigger, PyTorchJobOperator, TrainingJobSensor
from kubetrain.operators.triggers import ConnectionRef, event_job
from tests.airflow.support import TaskDeferred, deferred_trigger, first_event, task_context
from tests.support import pytorchjob, runs_for

TOKEN = "kt-secret-token-3f9a0c"
INLINE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://cluster.example.com"}}],
    "users": [{"name": "u", "user": {"token": TOKEN}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "ctx",
}


@pytest.fixture
def inline_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``kubernetes`` connection whose kubeconfig (and token) is stored in the connection itself."""
    extra = {"kube_config": json.dumps(INLINE_KUBECONFIG), "namespace": "team"}
    monkeypatch.setenv("AIRFLOW_CONN_INLINE_CLUSTER", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return "inline_cluster"


def test_a_deferred_task_stores_the_connection_id_not_the_credentials(inline_connection: str) -> None:
    op = PyTorchJobOperator(
        task_id="train", image="img", kubernetes_conn_id=inline_connection, deferrable=True, get_logs=False
    )
    op._connection_info = op._connection()  # as execute() leaves it: the worker did read the credentials
    assert op._connection_info.config_dict == INLINE_KUBECONFIG
    ref = {"kind": "PyTorchJob", "name": "train-1", "namespace": "team", "uid": "uid-1"}
    with pytest.raises(TaskDeferred) as deferred:
        op._defer(ref, task_context())
    trigger = deferred.value.trigger
    classpath, kwargs = trigger.serialize()
    stored = json.dumps(kwargs) + repr(trigger)  # the row Airflow writes, and what its log prints
    assert TOKEN not in stored and "cluster.example.com" not in stored
    assert kwargs["kubernetes_conn_id"] == inline_connection and kwargs["uid"] == "uid-1"

    # The triggerer rebuilds the trigger from the stored kwargs and reads the connection itself.
    rebuilt = JobTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert asyncio.run(rebuilt.ref.resolve()).config_dict == INLINE_KUBECONFIG


def test_a_deferred_sensor_stores_the_connection_id_not_the_credentials(inline_connection: str) -> None:
    sensor = TrainingJobSensor(
        task_id="wait", name="train-1", kubernetes_conn_id=inline_connection, deferrable=True
    )
    trigger = deferred_trigger(sensor, task_context())
    _, kwargs = trigger.serialize()
    assert TOKEN not in json.dumps(kwargs) + repr(trigger)
    assert kwargs["kubernetes_conn_id"] == inline_connection and kwargs["namespace"] == "team"


def test_a_trigger_names_a_kubeconfig_by_its_path() -> None:
    trigger = JobTrigger(
        kind="TrainJob", name="j", namespace="ns", config_file="/etc/kube/config", cluster_context="prod"
    )
    _, kwargs = trigger.serialize()
    assert kwargs["kubernetes_conn_id"] is None
    assert asyncio.run(trigger.ref.resolve()).to_dict() == {
        "in_cluster": False,
        "config_dict": None,
        "config_file": "/etc/kube/config",
        "context": "prod",
        "namespace": None,
    }


def test_a_trigger_deferred_by_an_earlier_version_still_runs() -> None:
    # Earlier versions stored the resolved connection; such a trigger is rebuilt after an upgrade.
    by_path = JobTrigger(
        kind="PyTorchJob",
        name="j",
        namespace="ns",
        connection={"in_cluster": False, "config_dict": None, "config_file": "/k", "context": "c"},
    )
    _, kwargs = by_path.serialize()
    assert "connection" not in kwargs and (kwargs["config_file"], kwargs["cluster_context"]) == ("/k", "c")
    inline = JobTrigger(
        kind="PyTorchJob", name="j", namespace="ns", connection={"config_dict": INLINE_KUBECONFIG}
    )
    assert inline._legacy_connection() is not None
    assert inline._legacy_connection().config_dict == INLINE_KUBECONFIG  # type: ignore[union-attr]


def test_triggers_of_one_cluster_share_a_watch_key_without_credentials() -> None:
    ref = ConnectionRef("kubernetes_default")
    assert ConnectionRef("kubernetes_default").key() == ref.key() != ConnectionRef("other").key()


def test_an_event_carries_the_jobs_identity_and_status_not_its_spec() -> None:
    job = pytorchjob("j", workers=1)
    job["metadata"].update(
        {
            "namespace": "ns",
            "uid": "uid-1",
            "annotations": {
                "kubetrain.dev/attempt": "2",
                "kubetrain.dev/last-checkpoint": "/ckpt/step-40",
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"token": TOKEN}),
            },
            "labels": {"kubetrain.dev/lineage": "j", "team": "x"},
            "managedFields": [{"manager": "kubectl"}],
        }
    )
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "HF_TOKEN", "value": TOKEN}
    ]
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    summary = event_job(job)
    assert TOKEN not in json.dumps(summary)
    assert summary == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "uid-1",
            "labels": {"kubetrain.dev/lineage": "j"},
            "annotations": {"kubetrain.dev/attempt": "2", "kubetrain.dev/last-checkpoint": "/ckpt/step-40"},
        },
        "status": job["status"],
    }


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "controller_process")
async def test_the_deferred_wait_ends_with_a_result_from_an_event_without_the_spec(
    namespace: str, kubeconfig: Path
) -> None:
    manifest = pytorchjob(
        "with-secret", workers=1, master_annotations=runs_for("1s"), worker_annotations=runs_for("1s")
    )
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["env"] = [{"name": "HF_TOKEN", "value": TOKEN}]
    op = PyTorchJobOperator(
        task_id="train", namespace=namespace, job=manifest, deferrable=True, get_logs=False
    )
    context = task_context()
    trigger = await asyncio.to_thread(deferred_trigger, op, context)
    _, kwargs = trigger.serialize()
    assert TOKEN not in json.dumps(kwargs)
    # The trigger rebuilt from what Airflow stored, as a triggerer does.
    event = await asyncio.wait_for(first_event(JobTrigger(**kwargs)), 120)
    assert event["status"] == "success", event
    assert TOKEN not in json.dumps(event) and "spec" not in event["job"]
    result = await asyncio.to_thread(op.execute_complete, context, event)
    assert (result["kind"], result["name"], result["state"]) == ("PyTorchJob", "with-secret", "Succeeded")
    assert result["uid"] == event["uid"] and result["attempt"] == 1
