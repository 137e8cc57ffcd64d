"""The committed CRDs are exactly what the models generate, and they are structural."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.api import crdgen, kinds, v1, v2
from kubetrain.api.base import VALIDATIONS

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


@functools.cache
def _rendered() -> dict[str, str]:
    return crdgen.render_all()


@functools.cache
def _document(file: str) -> dict[str, Any]:
    """One generated CRD, parsed once (the C loader when PyYAML has it: the documents are large)."""
    loaded: dict[str, Any] = yaml.load(
        _rendered()[file], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    return loaded


def test_committed_crds_match_the_generator() -> None:
    rendered = _rendered()
    committed = {p.name: p.read_text() for p in CRD_DIR.glob("*.yaml")}
    assert sorted(committed) == sorted(rendered), "run `make crds`"
    stale = [name for name, text in rendered.items() if committed[name] != text]
    assert not stale, f"{stale} differ from the models; run `make crds`"


def _walk(node: Any, path: str = "") -> list[str]:
    """Places that break the structural-schema rules the API server enforces."""
    problems = []
    if isinstance(node, dict):
        if "properties" in node and node.get("type") != "object":
            problems.append(f"{path}: properties without type object")
        if node.get("additionalProperties") is True:
            problems.append(f"{path}: additionalProperties: true")
        if "$ref" in node or "allOf" in node:
            problems.append(f"{path}: unresolved reference")
        for key, value in node.items():
            problems.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            problems.extend(_walk(value, f"{path}[{i}]"))
    return problems


@pytest.mark.parametrize("info", crdgen.crd_infos(), ids=lambda i: i.api_kind.kind)
def test_crd_schema_is_structural_and_names_its_kind(info: crdgen.CrdInfo) -> None:
    document = _document(f"{info.api_kind.group}_{info.api_kind.plural}.yaml")
    version = document["spec"]["versions"][0]
    assert _walk(version["schema"]["openAPIV3Schema"]) == []
    assert document["spec"]["names"]["kind"] == info.api_kind.kind
    assert version["additionalPrinterColumns"][0]["name"] in ("State", "Framework")


def test_every_job_kind_is_in_the_kubeflow_category() -> None:
    in_category = {i.api_kind.kind for i in crdgen.crd_infos() if "kubeflow" in i.categories}
    assert in_category == {k.kind for k in kinds.JOBS}


def test_pod_template_schema_comes_from_the_api_server_openapi() -> None:
    document = _document("kubeflow.org_pytorchjobs.yaml")
    spec = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template = spec["properties"]["pytorchReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    containers = template["properties"]["spec"]["properties"]["containers"]
    assert "containers" in template["properties"]["spec"]["required"]
    resources = containers["items"]["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert resources["x-kubernetes-int-or-string"] is True


def _schema(info: crdgen.CrdInfo) -> dict[str, Any]:
    """The generated openAPIV3Schema of one CRD (parsed once; read it, never change it)."""
    document = _document(f"{info.api_kind.group}_{info.api_kind.plural}.yaml")
    schema: dict[str, Any] = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node of a dotted path; ``*`` steps into map values and list items."""
    node = schema
    for part in path.split("."):
        node = (
            (node.get("additionalProperties") or node["items"]) if part == "*" else node["properties"][part]
        )
    return node


_INFOS = {info.api_kind.kind: info for info in crdgen.crd_infos()}
_BOUNDED = [
    *((kind.kind, f"{kind.replica_path}.*.replicas") for kind in kinds.V1_JOBS),
    ("PyTorchJob", "spec.elasticPolicy.minReplicas"),
    ("PyTorchJob", "spec.elasticPolicy.maxReplicas"),
    ("PaddleJob", "spec.elasticPolicy.maxReplicas"),
    ("TrainJob", "spec.trainer.numNodes"),
    *(
        (runtime, path)
        for runtime in ("TrainingRuntime", "ClusterTrainingRuntime")
        for path in (
            "spec.mlPolicy.numNodes",
            "spec.template.spec.replicatedJobs.*.replicas",
            "spec.template.spec.replicatedJobs.*.template.spec.parallelism",
            "spec.template.spec.replicatedJobs.*.template.spec.completions",
        )
    ),
]


@pytest.mark.parametrize(("kind", "path"), _BOUNDED, ids=[f"{k}:{p}" for k, p in _BOUNDED])
def test_every_pod_count_has_the_documented_maximum(kind: str, path: str) -> None:
    node = _at(_schema(_INFOS[kind]), path)
    assert node["type"] == "integer"
    assert node["maximum"] == v1.MAX_REPLICAS == v2.MAX_NODES == 10_000


def _messages(node: dict[str, Any]) -> list[str]:
    return [rule["message"] for rule in node.get(VALIDATIONS, [])]


# (kind, the replica type whose replicas decide success, when the rule applies): a rule must refuse 0.
_DECIDING = [
    ("PyTorchJob", "spec.pytorchReplicaSpecs[Master].replicas must be 1"),
    ("PyTorchJob", "spec.pytorchReplicaSpecs[Worker].replicas must be at least 1"),
    ("TFJob", "spec.tfReplicaSpecs[Chief/Master].replicas must be 1"),
    ("TFJob", "spec.tfReplicaSpecs[Worker].replicas must be at least 1 when there is no Chief or Master"),
    ("TFJob", "spec.tfReplicaSpecs must have a Chief, Master or Worker"),
    ("XGBoostJob", "spec.xgbReplicaSpecs[Master].replicas must be 1"),
    ("XGBoostJob", "spec.xgbReplicaSpecs[Master] must be present"),
    ("PaddleJob", "spec.paddleReplicaSpecs[Master].replicas must be at least 1"),
    ("PaddleJob", "spec.paddleReplicaSpecs[Worker].replicas must be at least 1 when there is no Master"),
    ("PaddleJob", "spec.paddleReplicaSpecs must have a Master or Worker"),
    ("JAXJob", "spec.jaxReplicaSpecs[Worker].replicas must be at least 1"),
    ("JAXJob", "spec.jaxReplicaSpecs must have a Worker"),
]


@pytest.mark.parametrize(("kind", "message"), _DECIDING, ids=[m for _, m in _DECIDING])
def test_the_replica_type_that_decides_success_cannot_be_empty(kind: str, message: str) -> None:
    replica_map = _at(_schema(_INFOS[kind]), kinds.v1_kind(kind).replica_path)
    assert any(m.startswith(message) for m in _messages(replica_map)), _messages(replica_map)


@pytest.mark.parametrize("kind", kinds.V1_JOBS, ids=lambda k: k.kind)
def test_every_v1_kind_checks_its_service_names_against_the_dns_label_limit(kind: kinds.V1Kind) -> None:
    [rule] = _schema(_INFOS[kind.kind])[VALIDATIONS]
    assert f"self.{kind.replica_path}" in rule["rule"] and "self.metadata.name" in rule["rule"]
    assert "<= 63" in rule["rule"]
    assert rule["fieldPath"] == ".metadata.name"
    assert "use a name of at most" in rule["messageExpression"]


def test_a_trainjob_name_leaves_room_for_the_shortest_pod_hostname() -> None:
    name = _at(_schema(_INFOS["TrainJob"]), "metadata.name")
    assert name["maxLength"] == 63
    limits = [r["rule"] for r in name[VALIDATIONS] if r["rule"].startswith("size(self)")]
    assert limits == [f"size(self) <= {63 - len('-a-0-0')}"]


def test_runtime_replicated_job_names_are_dns_labels_and_unique() -> None:
    for kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        jobs = _at(_schema(_INFOS[kind]), "spec.template.spec.replicatedJobs")
        assert jobs["items"]["properties"]["name"]["pattern"] == "^[a-z]([-a-z0-9]*[a-z0-9])?$"
        messages = _messages(jobs)
        assert any("name must be unique" in m for m in messages)
        assert any("dependsOn must name another replicated job" in m for m in messages)
        assert any("at most 10000 pods per replicated job" in m for m in messages)
        jobset = _at(_schema(_INFOS[kind]), "spec.template.spec")
        assert any("successPolicy.targetReplicatedJobs must name" in m for m in _messages(jobset))


def _defaults(node: Any, path: str = "") -> dict[str, Any]:
    """Every ``default`` of a schema, by the path of the property that carries it."""
    found: dict[str, Any] = {}
    if isinstance(node, dict):
        if "default" in node:
            found[path] = node["default"]
        for key, value in node.items():
            found |= _defaults(value, f"{path}.{key}")
    elif isinstance(node, list):
        for item in node:
            found |= _defaults(item, path)
    return found


def test_pod_templates_default_what_kubernetes_declares_as_upstream_crds_do() -> None:
    # Kueue copies the templates into its Workload, whose CRD defaults `protocol`; a job template
    # without the default looked changed to Kueue, which deleted and re-created its Workload forever.
    schema = _document("kubeflow.org_pytorchjobs.yaml")["spec"]["versions"][0]["schema"]
    defaults = _defaults(schema)
    ports = [v for p, v in defaults.items() if p.endswith(".ports.items.properties.protocol")]
    assert ports == ["TCP", "TCP", "TCP"]  # containers, init and ephemeral containers
    zero = {p: v for p, v in defaults.items() if ".template." in p and v in ("", 0, {}, [])}
    assert not zero, f"the OpenAPI generator's zero defaults are not Kubernetes defaults: {zero}"
