"""Generate the CustomResourceDefinitions from the pydantic models.

The models are the single source of truth: their JSON Schema becomes the CRD's
structural OpenAPI schema, their CEL markers become ``x-kubernetes-validations``
and their Kubernetes-type markers are expanded from the API server's own
OpenAPI (``k8s_schema``). ``make crds`` writes ``deploy/crds/``; a test fails
when the committed files differ from what this module produces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubetrain import naming
from kubetrain.api import k8s_schema, kinds, v1, v2
from kubetrain.api.base import K8S_REF, VALIDATIONS, ApiModel

JOB_CATEGORY = "kubeflow"


@dataclass(frozen=True)
class CrdInfo:
    """Everything about a CRD that is not in the model's schema."""

    model: type[ApiModel]
    categories: tuple[str, ...] = ()
    columns: tuple[dict[str, Any], ...] = ()
    scale: dict[str, str] | None = None
    name_rules: tuple[dict[str, str], ...] = ()
    root_rules: tuple[dict[str, str], ...] = ()  # rules that read metadata.name and spec together
    status: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api_kind(self) -> kinds.Kind:
        """The kind's identity, from the registry."""
        found: kinds.Kind = self.model.api_kind  # type: ignore[attr-defined]
        return found


def _state_columns() -> tuple[dict[str, Any], ...]:
    return (
        {
            "name": "State",
            "type": "string",
            "jsonPath": ".status.conditions[-1:].type",
            "description": "The job's current state: the type of its latest condition",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.conditions[-1:].reason", "priority": 1},
        {
            "name": "Checkpoint",
            "type": "string",
            "priority": 1,
            "jsonPath": ".metadata.annotations.kubetrain\\.dev/last-checkpoint",
        },
    )


def _annotation(key: str) -> str:
    return ".metadata.annotations." + key.replace(".", "\\.")


def _progress_columns(trainer_status: bool) -> tuple[dict[str, Any], ...]:
    """PROGRESS and ETA: a TrainJob's ``status.trainerStatus``, a v1 job's annotations (observability.md)."""
    if trainer_status:
        percent = {"type": "integer", "jsonPath": ".status.trainerStatus.progressPercentage"}
        eta = {"type": "integer", "jsonPath": ".status.trainerStatus.estimatedRemainingSeconds"}
    else:
        percent = {"type": "string", "jsonPath": _annotation(naming.ANNOTATION_PROGRESS)}
        eta = {"type": "string", "jsonPath": _annotation(naming.ANNOTATION_ETA)}
    return (
        {"name": "Progress", **percent, "description": "Percent done, as the training last reported"},
        {"name": "ETA", **eta, "description": "Seconds left, as the training last estimated"},
    )


def _v1_info(model: type[v1.TrainingJob]) -> CrdInfo:
    kind = model.api_kind
    replicas = tuple(
        {
            "name": f"{rtype}s" if rtype != "PS" else "PS",
            "type": "integer",
            "jsonPath": f".{kind.replica_path}.{rtype}.replicas",
            "priority": 0 if rtype == "Worker" else 1,
        }
        for rtype in kind.replica_types
    )
    state, age, *wide = _state_columns()
    scale = None
    if kind.scaled_replica is not None:
        rtype = kind.scaled_replica
        scale = {
            "specReplicasPath": f".{kind.replica_path}.{rtype}.replicas",
            "statusReplicasPath": f".status.replicaStatuses.{rtype}.active",
            "labelSelectorPath": f".status.replicaStatuses.{rtype}.selector",
        }
    return CrdInfo(
        model,
        categories=(JOB_CATEGORY,),
        columns=(state, *replicas, *_progress_columns(trainer_status=False), age, *wide),
        scale=scale,
        name_rules=(v1.NAME_RULE,),
        root_rules=(v1.service_name_rule(kind.replica_field),),
    )


def crd_infos() -> list[CrdInfo]:
    """Every CRD kubetrain serves."""
    trainjob_columns = (
        _state_columns()[0],
        {"name": "Runtime", "type": "string", "jsonPath": ".spec.runtimeRef.name"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".spec.trainer.numNodes"},
        *_progress_columns(trainer_status=True),
        *_state_columns()[1:],
    )
    runtime_columns = (
        {
            "name": "Framework",
            "type": "string",
            "jsonPath": ".metadata.labels." + naming.LABEL_TRAINER_FRAMEWORK.replace(".", "\\."),
        },
        {"name": "Nodes", "type": "integer", "jsonPath": ".spec.mlPolicy.numNodes"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )
    name_rule = v1.NAME_RULE
    return [
        *(_v1_info(kind) for kind in v1.V1_KINDS),
        CrdInfo(
            v2.TrainJob,
            categories=(JOB_CATEGORY,),
            columns=trainjob_columns,
            name_rules=(name_rule, v2.TRAINJOB_NAME_RULE),
        ),
        CrdInfo(v2.TrainingRuntime, columns=runtime_columns, status=False),
        CrdInfo(v2.ClusterTrainingRuntime, columns=runtime_columns, status=False),
    ]


class _Converter:
    """JSON Schema (pydantic) -> structural OpenAPI v3 (CRD)."""

    def __init__(self, defs: dict[str, Any], expander: k8s_schema.Expander) -> None:
        self.defs = defs
        self.expander = expander

    def convert(self, node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        if K8S_REF in node:
            return self._k8s(node)
        if "$ref" in node:
            target = self.convert(self.defs[node.pop("$ref").split("/")[-1]])
            return {**target, **self.convert(node)} if node else target
        if "anyOf" in node:
            return self._union(node, [b for b in node.pop("anyOf") if b.get("type") != "null"])
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "$defs", "const") or (key == "default" and value is None):
                continue
            if key == "additionalProperties" and value is True:
                continue
            if key == "properties":
                out[key] = {prop: self.convert(sub) for prop, sub in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self.convert(value)
            else:
                out[key] = value
        if "enum" in out and "type" not in out:
            out["type"] = "string"
        return out

    def _union(self, node: dict[str, Any], branches: list[dict[str, Any]]) -> dict[str, Any]:
        """An optional field (``X | None``: the one branch left), or int-or-string, which a structural
        schema spells with ``x-kubernetes-int-or-string``; no other union has a CRD form."""
        if len(branches) == 1:
            return {**self.convert(branches[0]), **self.convert(node)}
        if {b.get("type") for b in branches} == {"integer", "string"}:
            node.pop("x-kubernetes-int-or-string", None)
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
                **self.convert(node),
            }
        raise ValueError(f"unsupported union in CRD schema: {branches}")

    def _k8s(self, node: dict[str, Any]) -> dict[str, Any]:
        ref = node.pop(K8S_REF)
        is_array = node.pop("array", False)
        for key in ("anyOf", "type", "items", "additionalProperties", "title", "default"):
            node.pop(key, None)
        schema = self.expander.expand(ref)
        if is_array:
            return {"type": "array", "items": schema, **node}
        return {**schema, **node}


def schema_for(info: CrdInfo, expander: k8s_schema.Expander) -> dict[str, Any]:
    """The openAPIV3Schema of one CRD."""
    raw = info.model.model_json_schema(by_alias=True, mode="validation")
    converter = _Converter(raw.get("$defs", {}), expander)
    props = raw["properties"]
    schema: dict[str, Any] = {
        "type": "object",
        "description": (info.model.__doc__ or "").strip().splitlines()[0]
        if info.model.__doc__
        else info.api_kind.kind,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _metadata_schema(info),
            "spec": converter.convert(props["spec"]),
        },
        "required": ["spec"],
    }
    if info.root_rules:
        schema[VALIDATIONS] = list(info.root_rules)
    if "status" in props:
        schema["properties"]["status"] = converter.convert(props["status"])
    return schema


def _metadata_schema(info: CrdInfo) -> dict[str, Any]:
    """Root metadata may only constrain the name; jobs need a DNS-1035 name of at most 63 characters."""
    if not info.name_rules:
        return {"type": "object"}
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 63, VALIDATIONS: list(info.name_rules)}},
    }


def crd(info: CrdInfo, expander: k8s_schema.Expander) -> dict[str, Any]:
    """One CustomResourceDefinition manifest."""
    version: dict[str, Any] = {
        "name": info.api_kind.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema_for(info, expander)},
        "additionalPrinterColumns": list(info.columns),
    }
    subresources: dict[str, Any] = {}
    if info.status:
        subresources["status"] = {}
    if info.scale:
        subresources["scale"] = info.scale
    if subresources:
        version["subresources"] = subresources
    names: dict[str, Any] = {
        "kind": info.api_kind.kind,
        "listKind": f"{info.api_kind.kind}List",
        "plural": info.api_kind.plural,
        "singular": info.api_kind.singular,
        "shortNames": list(info.api_kind.short_names),
    }
    if info.categories:
        names["categories"] = list(info.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.api_kind.crd_name, "labels": {"app.kubernetes.io/part-of": "kubetrain"}},
        "spec": {
            "group": info.api_kind.group,
            "names": names,
            "scope": info.api_kind.scope,
            "versions": [version],
        },
    }


def render_all() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    expander = k8s_schema.Expander(k8s_schema.load())
    header = "# Generated by `make crds` from the models in kubetrain/api; do not edit.\n"
    return {
        f"{info.api_kind.group}_{info.api_kind.plural}.yaml": header
        + yaml.safe_dump(crd(info, expander), sort_keys=False, width=120)
        for info in crd_infos()
    }


def write_all(directory: Path) -> list[Path]:
    """Write every CRD into ``directory``, with a ``Kustomization`` (no extension, so ``kubectl apply -f`` skips it)."""
    directory.mkdir(parents=True, exist_ok=True)
    rendered = render_all()
    for stale in directory.glob("*.yaml"):
        if stale.name not in rendered and stale.name != "Kustomization":
            stale.unlink()
    written = []
    for name, text in rendered.items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(rendered),
    }
    (directory / "Kustomization").write_text(
        "# Generated by `make crds`; do not edit.\n" + yaml.safe_dump(kustomization, sort_keys=False)
    )
    return written


def main() -> None:
    """``python -m kubetrain.api.crdgen [DIR]``."""
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/crds")
    for path in write_all(target):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
