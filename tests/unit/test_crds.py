"""The committed CRDs are exactly what the models generate, and they are structural."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.api import crdgen

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


@functools.cache
def _rendered() -> dict[str, str]:
    return crdgen.render_all()


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


@pytest.mark.parametrize("info", crdgen.crd_infos(), ids=lambda i: i.kind)
def test_crd_schema_is_structural_and_names_its_kind(info: crdgen.CrdInfo) -> None:
    document = yaml.safe_load(_rendered()[f"{info.group}_{info.plural}.yaml"])
    version = document["spec"]["versions"][0]
    assert _walk(version["schema"]["openAPIV3Schema"]) == []
    assert document["spec"]["names"]["kind"] == info.kind
    assert version["additionalPrinterColumns"][0]["name"] in ("State", "Framework")


def test_every_job_kind_is_in_the_kubeflow_category() -> None:
    kinds = {i.kind for i in crdgen.crd_infos() if "kubeflow" in i.categories}
    assert kinds == {"PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob"}


def test_pod_template_schema_comes_from_the_api_server_openapi() -> None:
    document = yaml.safe_load(_rendered()["kubeflow.org_pytorchjobs.yaml"])
    spec = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template = spec["properties"]["pytorchReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    containers = template["properties"]["spec"]["properties"]["containers"]
    assert "containers" in template["properties"]["spec"]["required"]
    resources = containers["items"]["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert resources["x-kubernetes-int-or-string"] is True
