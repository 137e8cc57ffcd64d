"""Strategic merge for the pod-template and JobSet fields that TrainJob patches touch.

Kubernetes' strategic merge patch lives in Go (apimachinery) and no Python
client implements it. TrainJob's ``runtimePatches`` (and the older
``podTemplateOverrides``) may only touch a small, fixed set of fields, so this
merges exactly those the way the API server would: lists of named things by
their patch merge key (containers, env, volumes by ``name``; volume mounts by
``mountPath``; replicated jobs by ``name``), maps key by key, and every other
list (tolerations, args, command) replaced whole, as upstream marks them atomic.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_KEYS: dict[str, str] = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "claims": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def merge(base: Any, patch: Any) -> Any:
    """``base`` with ``patch`` merged in; neither argument is changed. A ``None`` value deletes the key."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = merge_list(merged[key], value, MERGE_KEYS[key])
        elif key in merged:
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def merge_list(base: list[Any], patch: list[Any], key: str) -> list[Any]:
    """Items of ``patch`` merged into the ``base`` item with the same ``key`` (base order kept), new ones appended."""
    merged = list(base)
    positions = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict)}
    for item in patch:
        if isinstance(item, dict) and item.get(key) in positions:
            index = positions[item[key]]
            merged[index] = merge(merged[index], item)
        else:
            positions[item.get(key) if isinstance(item, dict) else None] = len(merged)
            merged.append(copy.deepcopy(item))
    return merged


def upsert_env(container: dict[str, Any], env: list[dict[str, Any]]) -> None:
    """Set each variable of ``env`` on ``container``: replace one of the same name in place, else append."""
    current: list[dict[str, Any]] = container.setdefault("env", [])
    for var in env:
        for i, existing in enumerate(current):
            if existing.get("name") == var["name"]:
                current[i] = copy.deepcopy(var)
                break
        else:
            current.append(copy.deepcopy(var))
