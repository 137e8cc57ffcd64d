"""Fetch the Kubernetes type definitions the CRD schemas embed, from a live API server.

``kubetrain dev openapi`` runs this against the dev cluster and rewrites
``kubetrain/api/k8s-openapi.json``; an integration test checks that the
committed file still equals what the API server serves.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

from kubetrain.api import crdgen, k8s_schema
from kubetrain.api.base import K8S_REF
from kubetrain.devcluster.cluster import DevCluster


def model_refs() -> set[str]:
    """Every Kubernetes type the models point at."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if K8S_REF in node:
                found.add(node[K8S_REF])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for info in crdgen.crd_infos():
        walk(info.model.model_json_schema(by_alias=True, mode="validation"))
    return found


def fetch(cluster: DevCluster) -> dict[str, Any]:
    """The definitions file content, as served by ``cluster``'s API server."""
    state = cluster.load_state()
    if state is None:
        raise RuntimeError("the dev cluster is not up; run `kubetrain dev up` first")
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    documents = []
    for path in k8s_schema.OPENAPI_PATHS:
        request = urllib.request.Request(f"{state.server}/openapi/v3/{path}")
        request.add_header("Authorization", f"Bearer {cluster.pki.token('admin')}")
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            documents.append(json.load(response))
    version_request = urllib.request.Request(f"{state.server}/version")
    version_request.add_header("Authorization", f"Bearer {cluster.pki.token('admin')}")
    with urllib.request.urlopen(version_request, context=context, timeout=30) as response:
        server_version = json.load(response)["gitVersion"]
    return {
        "source": f"kube-apiserver {server_version} /openapi/v3/{{{','.join(k8s_schema.OPENAPI_PATHS)}}}",
        "definitions": k8s_schema.closure(documents, model_refs()),
    }


def render(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1, sort_keys=True) + "\n"


def committed_path() -> Path:
    return Path(str(resources.files("kubetrain.api").joinpath(k8s_schema.SCHEMA_FILE)))
