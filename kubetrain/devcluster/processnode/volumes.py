"""Pod volumes as host directories.

| volume | host directory |
|---|---|
| ``emptyDir`` | ``<state>/pods/<pod uid>/volumes/<name>``, removed with the pod |
| ``hostPath`` | the path itself (this is the host) |
| ``persistentVolumeClaim`` | the ``hostPath`` of the bound PersistentVolume (for claims of the ``kubetrain-local`` class: ``<cluster state>/volumes/<ns>/<claim>``, kept until the claim is deleted) |
| ``configMap``, ``secret`` | ``<state>/pods/<pod uid>/volumes/<name>``, one file per key |

Claims are bound by the dev cluster's provisioner (``kubetrain.devcluster.provisioner``), a
component of its own; a pod's claim is mounted from the hostPath of the volume bound to it.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import CONFIGMAPS, PVCS, PVS, SECRETS

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class VolumeError(RuntimeError):
    """A volume cannot be set up (yet); the message says which and why."""


async def prepare(kube: KubeClient, pod: Obj, pod_dir: Path) -> dict[str, Path]:
    """Host directory of every volume of ``pod``, created and filled as needed."""
    namespace = pod["metadata"]["namespace"]
    result: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        local = pod_dir / "volumes" / name
        if "emptyDir" in volume:
            local.mkdir(parents=True, exist_ok=True)
            result[name] = local
        elif "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") in ("DirectoryOrCreate", None, ""):
                path.mkdir(parents=True, exist_ok=True)
            result[name] = path
        elif "persistentVolumeClaim" in volume:
            result[name] = await _claim_path(kube, namespace, volume["persistentVolumeClaim"]["claimName"])
        elif "configMap" in volume or "secret" in volume:
            source = volume.get("configMap") or volume.get("secret") or {}
            ref = source.get("name") or source.get("secretName")
            resource = CONFIGMAPS if "configMap" in volume else SECRETS
            obj = await kube.get(resource, ref, namespace) if ref else None
            if obj is None and not source.get("optional"):
                raise VolumeError(f"{resource.kind} {ref!r} of volume {name!r} does not exist")
            local.mkdir(parents=True, exist_ok=True)
            data = (obj or {}).get("data") or {}
            for key, value in data.items():
                content = base64.b64decode(value) if resource is SECRETS else str(value).encode()
                (local / key).write_bytes(content)
            result[name] = local
        else:
            local.mkdir(parents=True, exist_ok=True)  # projected tokens and the like: an empty directory
            result[name] = local
    return result


async def _claim_path(kube: KubeClient, namespace: str, claim: str) -> Path:
    pvc = await kube.get(PVCS, claim, namespace)
    if pvc is None:
        raise VolumeError(f"PersistentVolumeClaim {namespace}/{claim} does not exist")
    volume_name = (pvc.get("spec") or {}).get("volumeName")
    if not volume_name or (pvc.get("status") or {}).get("phase") != "Bound":
        raise VolumeError(f"PersistentVolumeClaim {namespace}/{claim} is not bound yet")
    pv = await kube.get(PVS, volume_name)
    host_path = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
    if not host_path:
        raise VolumeError(f"PersistentVolume {volume_name} of claim {claim} is not a host directory")
    path = Path(host_path)
    path.mkdir(parents=True, exist_ok=True)
    return path
