"""Pod volumes as host directories, and a tiny provisioner for PersistentVolumeClaims.

| volume | host directory |
|---|---|
| ``emptyDir`` | ``<state>/pods/<pod uid>/volumes/<name>``, removed with the pod |
| ``hostPath`` | the path itself (this is the host) |
| ``persistentVolumeClaim`` | the ``hostPath`` of the bound PersistentVolume: ``<state>/volumes/<ns>/<claim>`` for claims of the ``kubetrain-local`` class, kept until the claim is deleted |
| ``configMap``, ``secret`` | ``<state>/pods/<pod uid>/volumes/<name>``, one file per key |

The provisioner is what a cloud's CSI driver is on a real cluster: it answers
every claim of the ``kubetrain-local`` storage class (the dev cluster's default)
with a hostPath PersistentVolume, and kube-controller-manager binds the two.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
from pathlib import Path
from typing import Any

from kubetrain import naming
from kubetrain.kube.client import KubeClient
from kubetrain.kube.errors import APIConflictError
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import Resource

log = logging.getLogger(__name__)
Obj = dict[str, Any]

STORAGE_CLASS = "kubetrain-local"
PROVISIONER = naming.PROCESS_NODE_PROVISIONER
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")


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


def storage_class() -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


class Provisioner:
    """Creates a hostPath PersistentVolume for each claim of the ``kubetrain-local`` class."""

    def __init__(self, kube: KubeClient, root: Path) -> None:
        self.kube = kube
        self.root = root
        self.claims = Informer(kube, PVCS)
        self.volumes = Informer(kube, PVS)
        self._wake = asyncio.Event()
        self.claims.add_handler(lambda old, new: self._wake.set())
        self.volumes.add_handler(lambda old, new: self._wake.set())

    async def run(self) -> None:
        with contextlib.suppress(APIConflictError):
            await self.kube.create(STORAGE_CLASSES, storage_class())
        self.claims.start()
        self.volumes.start()
        await asyncio.gather(self.claims.wait_synced(), self.volumes.wait_synced())
        while True:
            self._wake.clear()
            try:
                await self._sync()
            except Exception:
                log.exception("provisioning failed; retrying")
                await asyncio.sleep(2)
                continue
            await self._wake.wait()

    async def _sync(self) -> None:
        bound = {(pv.get("spec") or {}).get("claimRef", {}).get("uid") for pv in self.volumes.objects()}
        for claim in self.claims.objects():
            spec, meta = claim.get("spec") or {}, claim["metadata"]
            if (spec.get("storageClassName") or STORAGE_CLASS) != STORAGE_CLASS or spec.get("volumeName"):
                continue
            if meta["uid"] in bound or meta.get("deletionTimestamp"):
                continue
            path = self.root / meta["namespace"] / meta["name"]
            path.mkdir(parents=True, exist_ok=True)
            capacity = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
            pv: Obj = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": f"pvc-{meta['uid']}",
                    "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                },
                "spec": {
                    "capacity": {"storage": capacity},
                    "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": STORAGE_CLASS,
                    "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": meta["namespace"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                },
            }
            try:
                await self.kube.create(PVS, pv)
                log.info("provisioned %s for claim %s/%s", path, meta["namespace"], meta["name"])
            except APIConflictError:
                pass
        for pv in self.volumes.objects():
            annotations = pv["metadata"].get("annotations") or {}
            if annotations.get("pv.kubernetes.io/provisioned-by") != PROVISIONER:
                continue
            if (pv.get("status") or {}).get("phase") == "Released":
                shutil.rmtree(pv["spec"]["hostPath"]["path"], ignore_errors=True)
                await self.kube.delete(PVS, pv["metadata"]["name"])
                log.info("deleted %s: its claim is gone", pv["spec"]["hostPath"]["path"])
