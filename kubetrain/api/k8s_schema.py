"""Structural schemas of Kubernetes core types, taken from the API server's own OpenAPI.

CRDs that embed a pod template need the pod template's schema. Writing it by
hand drifts from Kubernetes; copying it from another project drifts too. So
``kubetrain dev openapi`` (``make k8s-openapi``) fetches the OpenAPI v3 documents that the
dev cluster's API server serves, keeps the definitions the models refer to
(and what they refer to), and commits them as ``k8s-openapi.json``. The CRD
generator then expands a reference into a structural schema: ``$ref`` inlined,
Kubernetes extensions that CRDs do not allow dropped, descriptions left out (the
schema is large and ``kubectl explain pod`` already documents it).

Defaults are kept where Kubernetes declares a value (``protocol: TCP`` of a container port, the
Ceph and Azure volume settings), as upstream's CRDs carry them: Kueue copies a job's pod templates
into its Workload, whose CRD applies these defaults, and takes a template that lacks one for a
changed job, deleting and re-creating its Workload forever. The OpenAPI's zero-valued defaults
(``""``, ``0``, ``{}``), which its generator adds to required fields, are left out.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SCHEMA_FILE = "k8s-openapi.json"
# The API groups whose types the models embed.
OPENAPI_PATHS = ("api/v1", "apis/autoscaling/v2")

_INT_OR_STRING: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
_SPECIAL: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": _INT_OR_STRING,
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": _INT_OR_STRING,
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    },
    # Embedded metadata: the fields a template may set (what controller-gen emits for embedded ObjectMeta).
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}},
        },
    },
}
_KEEP = {
    "type",
    "format",
    "properties",
    "items",
    "additionalProperties",
    "required",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-map-type",
}
_REF_PREFIX = "#/components/schemas/"


def load() -> dict[str, Any]:
    """The committed definitions, keyed by their OpenAPI name."""
    text = resources.files("kubetrain.api").joinpath(SCHEMA_FILE).read_text()
    definitions: dict[str, Any] = json.loads(text)["definitions"]
    return definitions


def closure(documents: list[dict[str, Any]], roots: set[str]) -> dict[str, Any]:
    """The definitions reachable from ``roots`` in the given OpenAPI v3 documents."""
    schemas: dict[str, Any] = {}
    for document in documents:
        schemas.update(document.get("components", {}).get("schemas", {}))
    kept: dict[str, Any] = {}
    pending = sorted(roots)
    while pending:
        name = pending.pop()
        if name in kept or name in _SPECIAL:
            continue
        if name not in schemas:
            raise KeyError(f"{name} is not in the API server's OpenAPI")
        kept[name] = _strip_docs(schemas[name])
        pending.extend(_refs(schemas[name]))
    return dict(sorted(kept.items()))


def _strip_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_docs(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_docs(v) for v in node]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"].removeprefix(_REF_PREFIX)] if "$ref" in node else []
        for value in node.values():
            found.extend(_refs(value))
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


class Expander:
    """Turns a definition name into a structural schema a CRD accepts."""

    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions

    def expand(self, name: str, *, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
        if name in _SPECIAL:
            copied: dict[str, Any] = json.loads(json.dumps(_SPECIAL[name]))
            return copied
        if name in _seen:  # a recursive type: accept anything below this point
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return self._convert(self.definitions[name], (*_seen, name))

    def _convert(self, node: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
        if "$ref" in node:
            return self.expand(node["$ref"].removeprefix(_REF_PREFIX), _seen=seen)
        if "allOf" in node and len(node["allOf"]) == 1:
            return self._convert(node["allOf"][0], seen)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "default" and value not in ("", 0, False, {}, []):
                out[key] = value
            if key not in _KEEP:
                continue
            if key == "properties":
                out[key] = {prop: self._convert(sub, seen) for prop, sub in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self._convert(value, seen)
            else:
                out[key] = value
        if "properties" in out and "type" not in out:
            out["type"] = "object"
        return out
