"""The kind registry (``kubetrain.api.kinds``) is the one place a kind's facts are written.

Two things are checked. The registry holds upstream's facts (Kubeflow Training Operator v1.9 and
Trainer v2), so a mistyped port or a reordered replica list fails here. And no other module writes a
kind's facts out again: source is read (``ast``) like ``test_layers`` does, and a module fails when a
string names a group, API version, plural, short name, replica field or CRD of our kinds, or when one
collection lists two or more of our kind names (a kind table of its own). Docstrings may name them,
and so may ``Literal[...]`` types, which cannot be computed (a test below checks those against the
registry).
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest

from kubetrain.api import crdgen, kinds, v1, v2
from kubetrain.controller.v1 import frameworks
from tests.unit.test_layers import modules

REGISTRY = "kubetrain.api.kinds"

# Upstream's per-kind constants (Training Operator v1.9): replica types in upstream's order, default
# container, port name and number, restart policy, operator-name label and metrics framework label.
UPSTREAM_V1 = {
    "PyTorchJob": (("Master", "Worker"), "pytorch", "pytorchjob-port", 23456, "OnFailure", "pytorchjob-controller", "pytorch"),
    "TFJob": (("Chief", "Master", "PS", "Worker", "Evaluator"), "tensorflow", "tfjob-port", 2222, "Never", "tfjob-controller", "tensorflow"),
    "XGBoostJob": (("Master", "Worker"), "xgboost", "xgboostjob-port", 9999, "Never", "xgboostjob-controller", "xgboost"),
    "PaddleJob": (("Master", "Worker"), "paddle", "master", 36543, "OnFailure", "paddlejob-controller", "paddle"),
    "JAXJob": (("Worker",), "jax", "jaxjob-port", 6666, "Never", "jaxjob-controller", "jax"),
}  # fmt: skip
UPSTREAM_FIELDS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


# Upstream's CRDs: the replica type the scale subresource resizes; its webhook: which kinds take replica
# keys in any case (TFJob's validates no key names, and its defaulting renames them).
UPSTREAM_SCALE = {
    "PyTorchJob": "Worker",
    "TFJob": None,
    "XGBoostJob": None,
    "PaddleJob": "Worker",
    "JAXJob": "Worker",
}
UPSTREAM_ANY_CASE_KEYS = {"TFJob"}


@pytest.mark.parametrize("kind", kinds.V1_JOBS, ids=lambda k: k.kind)
def test_each_v1_kind_has_upstreams_scale_subresource_and_key_spelling(kind: kinds.V1Kind) -> None:
    assert kind.scaled_replica == UPSTREAM_SCALE[kind.kind]
    assert kind.replica_keys_any_case == (kind.kind in UPSTREAM_ANY_CASE_KEYS)


@pytest.mark.parametrize("kind", kinds.V1_JOBS, ids=lambda k: k.kind)
def test_each_v1_kind_has_upstreams_constants(kind: kinds.V1Kind) -> None:
    assert (
        kind.replica_types,
        kind.default_container,
        kind.port_name,
        kind.default_port,
        kind.default_restart_policy,
        kind.controller_name,
        kind.framework_label,
    ) == UPSTREAM_V1[kind.kind]
    assert kind.replica_field == UPSTREAM_FIELDS[kind.kind]
    assert (kind.api_version, kind.plural, kind.success) == (
        "kubeflow.org/v1",
        kind.kind.lower() + "s",
        "Succeeded",
    )
    assert set(kind.leaders) <= set(kind.replica_types)


def test_the_trainer_kinds_are_upstreams() -> None:
    assert [(k.kind, k.api_version, k.plural, k.scope) for k in (kinds.TRAINJOB, *kinds.RUNTIMES)] == [
        ("TrainJob", "trainer.kubeflow.org/v1alpha1", "trainjobs", "Namespaced"),
        ("TrainingRuntime", "trainer.kubeflow.org/v1alpha1", "trainingruntimes", "Namespaced"),
        ("ClusterTrainingRuntime", "trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", "Cluster"),
    ]
    assert (kinds.TRAINJOB.success, kinds.TRAINJOB.default_container) == ("Complete", "node")


def test_a_kind_is_found_by_any_of_its_names_and_an_unknown_one_is_named() -> None:
    for name in ("PyTorchJob", "pytorchjob", "pytorchjobs", "PTJ"):
        assert kinds.job_kind(name) is kinds.PYTORCHJOB
    assert kinds.any_kind("ctr") is kinds.CLUSTER_TRAINING_RUNTIME
    with pytest.raises(ValueError, match="unknown job kind 'MPIJob'; choose from PyTorchJob, TFJob"):
        kinds.job_kind("MPIJob")
    with pytest.raises(ValueError, match="unknown job kind 'TrainJob'"):
        kinds.v1_kind("TrainJob")


def test_short_names_and_plurals_never_collide() -> None:
    names = [name for kind in kinds.ALL for name in kind.names()]
    assert len(names) == len(set(names))


def test_the_models_frameworks_and_crds_are_the_registrys() -> None:
    models = [*v1.V1_KINDS, v2.TrainJob, v2.TrainingRuntime, v2.ClusterTrainingRuntime]
    assert [m.api_kind for m in models] == list(kinds.ALL)  # type: ignore[attr-defined]
    for model in models:
        fields = model.model_fields
        assert typing.get_args(fields["kind"].annotation) == (model.api_kind.kind,)  # type: ignore[attr-defined]
        assert typing.get_args(fields["api_version"].annotation) == (model.api_kind.api_version,)  # type: ignore[attr-defined]
    assert [f.api for f in frameworks.FRAMEWORKS.values()] == list(kinds.V1_JOBS)
    assert [info.api_kind for info in crdgen.crd_infos()] == list(kinds.ALL)


# -- no module writes a kind's facts out again -----------------------------------------------------
def _facts() -> tuple[set[str], re.Pattern[str]]:
    """Strings only the registry may write: exactly, or as a word inside a longer string."""
    exact = {kinds.KUBEFLOW_GROUP, kinds.TRAINER_GROUP}
    words: set[str] = set()
    for kind in kinds.ALL:
        exact |= {kind.api_version, kind.crd_name, *kind.short_names}
        words.add(kind.plural)
        if isinstance(kind, kinds.V1Kind):
            words.add(kind.replica_field)
    return exact, re.compile(r"\b(" + "|".join(sorted(words)) + r")\b")


def _exempt(tree: ast.AST) -> set[int]:
    """The string constants that may name kinds: docstrings and ``Literal[...]`` arguments."""
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt.add(id(first.value))
        if (
            isinstance(node, ast.Subscript)
            and getattr(node.value, "id", getattr(node.value, "attr", "")) == "Literal"
        ):
            exempt |= {id(n) for n in ast.walk(node.slice)}
    return exempt


def restated_facts(sources: dict[str, Path]) -> set[tuple[str, str]]:
    """(module, what it writes out) for each kind fact or kind table outside the registry."""
    exact, word = _facts()
    kind_names = {kind.kind for kind in kinds.ALL}
    found: set[tuple[str, str]] = set()
    for name, path in sources.items():
        if name == REGISTRY:
            continue
        tree = ast.parse(path.read_text())
        exempt = _exempt(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt:
                if node.value in exact or word.search(node.value):
                    found.add((name, node.value))
            elif isinstance(node, ast.Dict | ast.List | ast.Tuple | ast.Set):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                listed = {
                    item.value
                    for item in items
                    if isinstance(item, ast.Constant) and item.value in kind_names and id(item) not in exempt
                }
                if len(listed) >= 2:
                    found.add((name, "a table of kinds: " + ", ".join(sorted(listed))))
    return found


def test_no_module_writes_out_a_kind_fact_the_registry_holds() -> None:
    written_out = restated_facts(modules())
    listed = "\n".join(f"  {module}: {what!r}" for module, what in sorted(written_out))
    assert not written_out, f"read these from kubetrain.api.kinds instead:\n{listed}"


def test_the_check_sees_each_kind_of_restatement(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Reconciles pytorchjobs.kubeflow.org."""\n'
        "from typing import Literal\n"
        'API: Literal["kubeflow.org/v1"] = "x"\n'
        'PLURAL = "tfjobs"\n'
        'RULE = "has(self.jaxReplicaSpecs.Worker)"\n'
        'SHORT = {"ptj": 1}\n'
        'TABLE = {"PyTorchJob": "pytorch", "TFJob": "tensorflow"}\n'
        'ONE = ("PyTorchJob", "pytorch")\n'
    )
    assert restated_facts({"probe": probe}) == {
        ("probe", "tfjobs"),
        ("probe", "has(self.jaxReplicaSpecs.Worker)"),
        ("probe", "ptj"),
        ("probe", "a table of kinds: PyTorchJob, TFJob"),
    }
