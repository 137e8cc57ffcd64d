"""A templated ``job`` manifest: parsed first, then rendered value by value, so no value adds structure.

Rendering a YAML manifest as one text would let a templated value (from ``dag_run.conf``, a param, an
XCom) close its quotes and write YAML of its own: a privileged ``securityContext``, a ``hostPath``
volume, another ``serviceAccountName``. These tests make those attempts and check that the job that
would be submitted is the one the DAG author wrote.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubetrain.client.errors import InvalidJobError
from kubetrain.operators import TrainingJobOperator
from kubetrain.operators.compat import AIRFLOW_V_3_0_PLUS
from kubetrain.operators.templating import render_manifest_leaves
from tests.airflow.support import task_context

if AIRFLOW_V_3_0_PLUS:
    from airflow.sdk import DAG
else:
    from airflow import DAG  # type: ignore[no-redef]

MANIFEST = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: "sweep-{{ params.size }}"
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: "registry.example.com/train:{{ dag_run.conf['tag'] }}"
              args: ["--config", "train.yaml", "--lr={{ dag_run.conf['lr'] }}"]
              env:
                - name: NOTE
                  value: "{{ dag_run.conf['note'] }}"
"""

# Each tries to turn a value into structure: closing the quotes and indenting YAML of its own.
INJECTIONS = {
    "tag": '1.4"\n              securityContext: {privileged: true}\n              x: "',
    "lr": '0.1"]\n          serviceAccountName: cluster-admin\n          volumes: [{name: host, hostPath: {path: /}}]\n          y: ["',
    "note": "x\n                  securityContext:\n                    privileged: true",
}


@dataclass
class FakeDagRun:
    conf: dict[str, Any] = field(default_factory=dict)


def dag(**kwargs: Any) -> Any:
    return DAG("templating", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), **kwargs)


def rendered_job(op: TrainingJobOperator, conf: dict[str, Any], **params: Any) -> dict[str, Any]:
    """Render as the worker does before ``execute``, then build the manifest that would be submitted."""
    context = {"dag_run": FakeDagRun(conf), "params": params, **task_context()}
    op.render_template_fields(context)
    body: dict[str, Any] = op.build_manifest(context)
    return body


def container(body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert set(spec) == {"containers"}, f"the pod spec gained {sorted(set(spec) - {'containers'})}"
    (only,) = spec["containers"]
    return dict(only)


@pytest.mark.parametrize("native", [False, True], ids=["text", "native objects"])
def test_values_from_dag_run_conf_cannot_add_structure(native: bool) -> None:
    with dag(render_template_as_native_obj=native):
        op = TrainingJobOperator(task_id="train", job=MANIFEST)
    body = rendered_job(op, INJECTIONS, size="s")
    pod = container(body)
    assert set(pod) == {"name", "image", "args", "env"}, "no securityContext, no other keys"
    assert pod["image"] == "registry.example.com/train:" + INJECTIONS["tag"]
    assert pod["args"] == ["--config", "train.yaml", "--lr=" + INJECTIONS["lr"]]
    assert pod["env"] == [{"name": "NOTE", "value": INJECTIONS["note"]}]
    assert body["metadata"]["name"] == "sweep-s"


@pytest.mark.parametrize(
    "note",
    [{"securityContext": {"privileged": True}}, "{'securityContext': {'privileged': True}}"],
    ids=["a mapping", "text that reads as a mapping"],
)
def test_a_value_rendered_into_a_mapping_is_refused_naming_where(note: Any) -> None:
    # A DAG that renders native objects turns a mapping, or text that reads as one, into a mapping:
    # refused, not inserted.
    with dag(render_template_as_native_obj=True):
        op = TrainingJobOperator(task_id="train", job=MANIFEST)
    attack = {**INJECTIONS, "note": note}
    with pytest.raises(
        InvalidJobError,
        match=r"job\.spec\.pytorchReplicaSpecs\.Master\.template\.spec\.containers\[0\]\.env\[0\]\.value: "
        r"the template .* rendered into a dict",
    ):
        rendered_job(op, attack, size="s")


def test_keys_are_never_rendered() -> None:
    manifest = MANIFEST.replace(
        "            - name: pytorch\n",
        "            - name: pytorch\n              \"{{ dag_run.conf['key'] }}\": x\n",
    )
    with dag():
        op = TrainingJobOperator(task_id="train", job=manifest)
    pod = container(rendered_job(op, {**INJECTIONS, "key": "securityContext"}, size="s"))
    assert pod["{{ dag_run.conf['key'] }}"] == "x" and "securityContext" not in pod


def test_a_native_number_stays_a_number() -> None:
    manifest = MANIFEST.replace("replicas: 1", 'replicas: "{{ params.masters }}"')
    with dag(render_template_as_native_obj=True):
        op = TrainingJobOperator(task_id="train", job=manifest)
    body = rendered_job(op, INJECTIONS, size="s", masters=1)
    assert body["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


@pytest.mark.parametrize("resolved_by_dag_processor", [False, True])
def test_a_manifest_file_is_found_like_any_template_file_and_parsed_first(
    tmp_path: Path, resolved_by_dag_processor: bool
) -> None:
    (tmp_path / "pytorchjob.yaml").write_text(MANIFEST)
    with dag(template_searchpath=[str(tmp_path)]) as the_dag:
        op = TrainingJobOperator(task_id="train", job="pytorchjob.yaml")
    if resolved_by_dag_processor:  # as the DAG processor does: the field then holds the file's text
        the_dag.resolve_template_files()
    pod = container(rendered_job(op, INJECTIONS, size="m"))
    assert pod["image"] == "registry.example.com/train:" + INJECTIONS["tag"]


def test_a_manifest_built_by_a_task_is_taken_whole() -> None:
    # A job given as one template expression is the whole manifest: it comes from a task (an XCom),
    # as a mapping, or as YAML text.
    whole = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "built"},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": []}}}}
        },
    }
    for native in (False, True):
        with dag(render_template_as_native_obj=native):
            op = TrainingJobOperator(task_id="train", job="{{ params.manifest }}")
        body = rendered_job(op, {}, manifest=whole)
        assert body["metadata"]["name"] == "built" and body["spec"] == whole["spec"]


def test_an_unquoted_template_is_refused_when_the_dag_is_parsed() -> None:
    with pytest.raises(
        ValueError, match=r"quote each templated value, e\.g\. image: \"\{\{ params\.image \}\}\""
    ):
        TrainingJobOperator(
            task_id="train", job=MANIFEST.replace('"sweep-{{ params.size }}"', "{{ params.name }}")
        )


def test_render_manifest_leaves_renders_only_templated_strings() -> None:
    seen: list[str] = []

    def render(text: str) -> Any:
        seen.append(text)
        return text.upper()

    template = {"a": "plain", "b": ["{{ x }}", 3, None, {"c": "{% if y %}y{% endif %}"}], "{{ k }}": "v"}
    assert render_manifest_leaves(template, render) == {
        "a": "plain",
        "b": ["{{ X }}", 3, None, {"c": "{% IF Y %}Y{% ENDIF %}"}],
        "{{ k }}": "v",
    }
    assert seen == ["{{ x }}", "{% if y %}y{% endif %}"]
    with pytest.raises(InvalidJobError, match=r"job\.b\[0\]: .* rendered into a list"):
        render_manifest_leaves(template, lambda text: [text])


# -- every other template field: values only, no control keys ------------------------------------------
SECRET_ENV = {"valueFrom": {"secretKeyRef": {"name": "cloud-admin", "key": "token"}}}


def convenience_operator(**fields: Any) -> TrainingJobOperator:
    with dag(render_template_as_native_obj=True):
        return TrainingJobOperator(
            task_id="train", name="sweep", image="registry.example.com/train:1", num_workers=1, **fields
        )


@pytest.mark.parametrize(
    ("fields", "conf", "refused"),
    [
        (
            {"env": [{"name": "TOKEN", "value": "{{ dag_run.conf['token'] }}"}]},
            {"token": SECRET_ENV},
            r"env\[0\]\.value",
        ),
        ({"env": "{{ dag_run.conf['env'] }}"}, {"env": [{"name": "TOKEN", **SECRET_ENV}]}, r"env"),
        ({"env": {"TOKEN": "{{ dag_run.conf['token'] }}"}}, {"token": SECRET_ENV}, r"env\.TOKEN"),
        (
            {"annotations": {"note": "{{ dag_run.conf['note'] }}"}},
            {"note": {"kubetrain.dev/checkpoint-secret": "cloud-admin"}},
            r"annotations\.note",
        ),
        (
            {"labels": {"team": "{{ dag_run.conf['team'] }}"}},
            {"team": {"kubetrain.dev/lineage": "x"}},
            r"labels\.team",
        ),
        ({"namespace": "{{ dag_run.conf['ns'] }}"}, {"ns": ["kube-system"]}, r"namespace"),
        (
            {"checkpoint_volume": "{{ dag_run.conf['claim'] }}"},
            {"claim": {"name": "other"}},
            r"checkpoint_volume",
        ),
        (
            {"args": "{{ dag_run.conf['args'] }}"},
            {"args": [{"securityContext": {"privileged": True}}]},
            r"args",
        ),
    ],
    ids=[
        "env value",
        "env whole",
        "env mapping value",
        "annotation value",
        "label value",
        "namespace",
        "checkpoint volume",
        "args of structure",
    ],
)
def test_no_template_field_renders_into_structure(
    fields: dict[str, Any], conf: dict[str, Any], refused: str
) -> None:
    op = convenience_operator(**fields)
    with pytest.raises(InvalidJobError, match=rf"^{refused}: the template .* rendered into a"):
        rendered_job(op, conf)


def test_templated_values_of_every_field_still_render() -> None:
    op = convenience_operator(
        command=["python", "{{ params.script }}"],
        args="{{ params.args }}",  # a whole template may render into a list of values, for args only
        env={"LR": "{{ dag_run.conf['lr'] }}", "PLAIN": "1"},
        labels={"team": "{{ params.team }}"},
        annotations={"kubetrain.dev/stall-timeout-seconds": "600"},  # written in the DAG: fine
    )
    body = rendered_job(op, {"lr": 0.1}, script="train.py", args=["--epochs", "2"], team="vision")
    pod = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert pod["command"] == ["python", "train.py"] and pod["args"] == ["--epochs", "2"]
    assert {"name": "LR", "value": "0.1"} in pod["env"]
    assert body["metadata"]["labels"]["team"] == "vision"
    assert body["metadata"]["annotations"]["kubetrain.dev/stall-timeout-seconds"] == "600"


def test_a_literal_argument_that_names_a_yaml_file_is_not_read_as_a_template() -> None:
    op = convenience_operator(command=["python", "train.py"], args=["--config", "config.yaml"])
    pod = rendered_job(op, {})["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert pod["args"] == ["--config", "config.yaml"]


def test_a_manifest_built_whole_by_a_template_cannot_set_control_annotations() -> None:
    whole = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "built", "annotations": {"kubetrain.dev/checkpoint-volume": "someone-elses"}},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": []}}}}
        },
    }
    with dag(render_template_as_native_obj=True):
        op = TrainingJobOperator(task_id="train", job="{{ dag_run.conf['manifest'] }}")
    with pytest.raises(
        InvalidJobError,
        match=r"job\.metadata\.annotations: kubetrain\.dev/checkpoint-volume came from a template .* "
        r"checkpoint_volume",
    ):
        rendered_job(op, {"manifest": whole})
