"""A container's environment, built as the kubelet builds it.

Order and precedence follow Kubernetes: ``envFrom`` first, then ``env`` in
order, each value expanded with ``$(VAR)`` against what came before (``$$``
escapes). ``valueFrom`` reads the pod's own fields (name, namespace, uid,
labels, annotations, node, service account, IPs), the container's resources,
and ConfigMap and Secret keys.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable
from typing import Any

from kubetrain import quantity

Obj = dict[str, Any]
Lookup = Callable[[str, str, str], Awaitable[Obj | None]]  # (kind, namespace, name) -> object

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class EnvError(RuntimeError):
    """A referenced ConfigMap, Secret or key is missing; the container cannot start yet."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are substituted, others left as written."""

    def replace(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return _VAR.sub(replace, text)


def field_value(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(ip.get("ip", "") for ip in status.get("podIPs") or []),
        "status.hostIPs": ",".join(ip.get("ip", "") for ip in status.get("hostIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_REF.match(path)
    if match:
        return str((meta.get(match[1]) or {}).get(match[2], ""))
    if path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    raise EnvError(f"unsupported fieldRef {path!r}")


def resource_value(container: Obj, ref: Obj) -> str:
    kind, _, name = ref["resource"].partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if value is None:
        return "0"
    divisor = quantity.parse(ref.get("divisor") or "1")
    return str(-(-quantity.parse(value) // divisor))  # rounded up, as the kubelet does


async def _key(lookup: Lookup, kind: str, namespace: str, ref: Obj) -> str | None:
    obj = await lookup(kind, namespace, ref["name"])
    if obj is None:
        if ref.get("optional"):
            return None
        raise EnvError(f"{kind} {namespace}/{ref['name']} does not exist")
    data = obj.get("data") or {}
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise EnvError(f"{kind} {namespace}/{ref['name']} has no key {ref['key']!r}")
    value = data[ref["key"]]
    return base64.b64decode(value).decode() if kind == "Secret" else str(value)


async def container_env(pod: Obj, container: Obj, lookup: Lookup) -> dict[str, str]:
    """The env a container's process gets from its spec (before node defaults and rewriting)."""
    env = await _env_from(pod["metadata"]["namespace"], container, lookup)
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        value = await _value_from(pod, container, name, item["valueFrom"], lookup)
        if value is not None:
            env[name] = value
    return env


async def _env_from(namespace: str, container: Obj, lookup: Lookup) -> dict[str, str]:
    """What the container's ``envFrom`` ConfigMaps and Secrets give, prefixed."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            obj = await lookup(kind, namespace, ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f"{kind} {namespace}/{ref['name']} does not exist")
            for name, raw in (obj.get("data") or {}).items():
                env[prefix + name] = base64.b64decode(raw).decode() if kind == "Secret" else str(raw)
    return env


async def _value_from(pod: Obj, container: Obj, name: str, source: Obj, lookup: Lookup) -> str | None:
    """The value of env ``name`` from its ``valueFrom`` (None: an optional key that is not there)."""
    namespace = pod["metadata"]["namespace"]
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        return resource_value(container, source["resourceFieldRef"])
    if "configMapKeyRef" in source:
        return await _key(lookup, "ConfigMap", namespace, source["configMapKeyRef"])
    if "secretKeyRef" in source:
        return await _key(lookup, "Secret", namespace, source["secretKeyRef"])
    raise EnvError(f"env {name}: unsupported valueFrom {sorted(source)}")
