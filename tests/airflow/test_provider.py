"""The provider without a cluster: argument checks, manifests, identity, the trigger's round trip, the DAGs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from kubetrain.operators import JobTrigger, PyTorchJobOperator, TrainingJobOperator, TrainJobOperator
from kubetrain.operators.compat import AirflowException
from kubetrain.operators.identity import derived_name, task_identity, task_lineage
from kubetrain.operators.provider import get_provider_info
from tests.airflow.support import task_context
from tests.docs_commands import python_blocks

REPO = Path(__file__).resolve().parents[2]


NIGHTLY = {
    "dag_id": "nightly_training",
    "task_id": "train_model",
    "run_id": "scheduled__2026-11-29T00:00:00+00:00",
}


def context(**overrides: Any) -> dict[str, Any]:
    """The context of a run of the nightly DAG's task, with ``overrides`` of its task instance."""
    return task_context(**(NIGHTLY | overrides))


def test_a_job_name_is_stable_across_tries_and_distinct_across_runs_and_maps() -> None:
    first = derived_name(context(try_number=1))
    assert first == derived_name(context(try_number=3))
    assert first != derived_name(context(run_id="manual__2026-11-30"))
    assert first != derived_name(context(map_index=2))
    assert first.startswith("train-model-") and len(first) <= 45


def test_identity_labels_are_label_safe() -> None:
    labels = task_identity(context())
    assert labels == {
        "kubetrain.dev/dag-id": "nightly_training",
        "kubetrain.dev/task-id": "train_model",
        "kubetrain.dev/run-id": "scheduled__2026-11-29T00_00_00_00_00",
        "kubetrain.dev/map-index": "none",
    }


def test_task_instances_the_readable_labels_merge_are_told_apart_by_their_identity() -> None:
    pairs = [
        (context(task_id="训练"), context(task_id="評価")),
        (
            context(run_id="manual__2026-01-01T00:00:00+00:00"),
            context(run_id="manual__2026-01-01T00_00_00_00_00"),
        ),
    ]
    for one, other in pairs:
        assert task_identity(one) == task_identity(other), "the labels for people are the same"
        assert task_lineage(one) != task_lineage(other) and task_lineage(one).hash != task_lineage(other).hash
        assert derived_name(one) != derived_name(other)
    assert task_lineage(context(try_number=1)) == task_lineage(context(try_number=4))
    assert task_lineage(context(map_index=0)) != task_lineage(context(map_index=1))


def test_every_try_asks_for_the_same_lineage() -> None:
    op = PyTorchJobOperator(task_id="train", image="img", checkpoint_dir="/ckpt", rerun_on_clear=True)
    requests = []
    for try_number in (1, 2):
        ctx = context(try_number=try_number)
        op._manifest, op._ns = op.build_manifest(ctx), "team-a"
        requests.append(op.lineage_request(ctx))
    first, second = requests
    assert first.identity == second.identity == task_lineage(context())
    assert first.spec_hash == second.spec_hash, "the try number is a label, not part of the spec"
    assert first.first_name == first.base_lineage == derived_name(context())
    assert (first.namespace, first.rerun_succeeded) == ("team-a", True)
    assert not PyTorchJobOperator(task_id="t", image="img").rerun_on_clear, (
        "returning the result is the default"
    )


def test_convenience_arguments_build_a_labelled_pytorchjob() -> None:
    op = PyTorchJobOperator(
        task_id="train",
        image="img",
        command=["python", "train.py"],
        num_workers=3,
        gpus=1,
        checkpoint_dir="/ckpt",
        backoff_limit=2,
    )
    body = op.build_manifest(context(try_number=2))
    assert body["kind"] == "PyTorchJob"
    assert body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    labels = body["metadata"]["labels"]
    assert labels["kubetrain.dev/try-number"] == "2" and labels["kubetrain.dev/task-id"] == "train_model"
    assert labels["kubetrain.dev/lineage"] == body["metadata"]["name"]
    assert body["metadata"]["annotations"]["kubetrain.dev/attempt"] == "1"


def test_a_manifest_file_is_loaded_and_labelled(tmp_path: Path) -> None:
    op = TrainingJobOperator(task_id="train", job=str(REPO / "examples" / "pytorchjob-gpu-workers.yaml"))
    body = op.build_manifest(context())
    assert body["metadata"]["name"] == "mnist-gpu"
    assert body["metadata"]["labels"]["kubetrain.dev/dag-id"] == "nightly_training"


def test_a_job_goes_to_the_kueue_queue_and_priority_the_task_names() -> None:
    for op in (
        PyTorchJobOperator(task_id="train", image="img", queue_name="team-a", priority_class="high"),
        TrainingJobOperator(
            task_id="train",
            job=str(REPO / "examples" / "pytorchjob-gpu-workers.yaml"),
            queue_name="team-a",
            priority_class="high",
        ),
    ):
        labels = op.build_manifest(context())["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
        assert labels["kueue.x-k8s.io/priority-class"] == "high"
    scope: dict[str, Any] = {}
    for block in python_blocks("docs/kueue.md"):
        exec(compile(block, "docs/kueue.md", "exec", dont_inherit=True), scope)
    assert (scope["train"].queue_name, scope["train"].priority_class) == ("gpus", "low")


def test_a_manifest_decides_the_kind_unless_the_operator_names_another(tmp_path: Path) -> None:
    tfjob = tmp_path / "tfjob.yaml"
    tfjob.write_text(
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: tf}\n"
        "spec: {tfReplicaSpecs: {Worker: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}}}\n"
    )
    op = TrainingJobOperator(task_id="tf", job=str(tfjob))
    assert op.build_manifest(context())["kind"] == "TFJob"
    assert op.kind == "TFJob", "a retry looks for TFJobs"
    with pytest.raises(AirflowException, match="job is a TFJob but this task runs PyTorchJobs"):
        PyTorchJobOperator(task_id="tf", job=str(tfjob)).build_manifest(context())


def test_the_documented_operators_construct() -> None:
    scope: dict[str, Any] = {}
    for block in python_blocks("docs/airflow.md"):
        exec(compile(block, "docs/airflow.md", "exec", dont_inherit=True), scope)  # as a DAG file runs them
    train = scope["train"]
    assert (train.kind, train.num_workers, train.gpus, train.checkpoint_volume) == (
        "PyTorchJob",
        3,
        1,
        "train-checkpoints",
    )


def test_a_trainjob_needs_a_runtime() -> None:
    with pytest.raises(ValueError, match="runtime is required for a TrainJob"):
        TrainJobOperator(task_id="t", image="img")
    body = TrainJobOperator(
        task_id="t", image="img", runtime="torch-distributed", num_nodes=2
    ).build_manifest(context())
    assert (
        body["spec"]["runtimeRef"]["name"] == "torch-distributed" and body["spec"]["trainer"]["numNodes"] == 2
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_finish_action": "explode"}, "on_finish_action must be one of delete, delete_succeeded, keep"),
        ({"on_kill_action": "ignore"}, "on_kill_action must be one of delete, suspend, keep"),
        ({"image": None}, "image is required when no job manifest is given"),
        (
            {"job": {"kind": "PyTorchJob"}},
            "pass either job (a full manifest) or convenience arguments, not both",
        ),
        ({"kind": "MPIJob"}, "unknown job kind 'MPIJob'"),
        ({"status_interval": 0}, "status_interval must be positive"),
        ({"queue_name": "Team A"}, "queue_name must name a Kueue LocalQueue"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"task_id": "t", "image": "img", **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingJobOperator(**arguments)


def test_bad_convenience_values_are_named_before_submitting() -> None:
    op = PyTorchJobOperator(task_id="t", image="img", clean_pod_policy="Sometimes")
    with pytest.raises(Exception, match="clean_pod_policy must be one of None, Running, All"):
        op.build_manifest(context())


def test_the_trigger_serializes_to_what_rebuilds_it() -> None:
    trigger = JobTrigger(
        kind="PyTorchJob",
        name="j",
        namespace="ns",
        connection={"in_cluster": True},
        deadline=123.0,
        status_interval=5,
        on_kill_action="suspend",
        get_logs=False,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "kubetrain.operators.triggers.JobTrigger"
    from importlib import import_module

    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)


def test_provider_info_lists_the_modules() -> None:
    info = get_provider_info()
    assert info["package-name"] == "kubetrain"
    assert "kubetrain.operators.operators" in info["operators"][0]["python-modules"]
    assert info["extra-links"] == ["kubetrain.operators.links.TrainingJobLink"]


def test_the_provider_is_registered_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    assert "kubetrain" in ProvidersManager().providers


def test_every_example_dag_imports() -> None:
    from kubetrain.operators.compat import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "deferrable_training",
        "hyperparameter_sweep",
        "retry_with_resume",
        "train_and_evaluate",
        "trainjob_training",
    ]
    for dag in bag.dags.values():
        assert dag.tags and "kubetrain" in dag.tags
        assert dag.start_date is not None and dag.start_date <= dt.datetime.now(dt.UTC)
