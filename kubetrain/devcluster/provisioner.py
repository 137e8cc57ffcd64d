"""The dev cluster's storage: a hostPath PersistentVolume for each claim of the ``kubetrain-local`` class.

This is what a cloud's CSI driver is on a real cluster: it answers every claim of the dev cluster's
default storage class with a hostPath volume under ``<cluster state>/volumes/<ns>/<claim>``, and
kube-controller-manager binds the two; when the claim is deleted, the volume and its directory go.
It runs as a component of its own (``kubetrain dev up`` starts it), so claims bind whether or not
the process node runs: the pods of upstream examples that mount a claim are only scheduled, also on
the simulated nodes, once it is bound. The same process removes the simulated nodes' terminating
pods (``podfinalizer``), the other thing the dev cluster does beside its nodes whatever runs.
``/healthz`` answers 200 once both have synced their caches.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
from pathlib import Path
from typing import Any

from aiohttp import web

from kubetrain import naming
from kubetrain.devcluster.podfinalizer import PodFinalizer
from kubetrain.devcluster.process import run_until_stopped
from kubetrain.kube.client import KubeClient
from kubetrain.kube.errors import APIConflictError
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import PVCS, PVS, STORAGE_CLASSES

log = logging.getLogger(__name__)
Obj = dict[str, Any]

STORAGE_CLASS = "kubetrain-local"
PROVISIONER = naming.PROCESS_NODE_PROVISIONER


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
        self.synced = asyncio.Event()
        self._wake = asyncio.Event()
        self.claims.add_handler(lambda old, new: self._wake.set())
        self.volumes.add_handler(lambda old, new: self._wake.set())

    async def run(self) -> None:
        with contextlib.suppress(APIConflictError):
            await self.kube.create(STORAGE_CLASSES, storage_class())
        self.claims.start()
        self.volumes.start()
        await asyncio.gather(self.claims.wait_synced(), self.volumes.wait_synced())
        self.synced.set()
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


async def serve_health(provisioner: Provisioner, finalizer: PodFinalizer, port: int) -> web.AppRunner:
    """``GET /healthz`` on 127.0.0.1:``port``: 200 once the provisioner's and finalizer's caches are synced."""

    async def healthz(request: web.Request) -> web.Response:
        synced = provisioner.synced.is_set() and finalizer.pods.has_synced
        return web.Response(text="ok") if synced else web.Response(status=503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def run(kubeconfig: str, root: Path, port: int) -> None:
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    provisioner, finalizer = Provisioner(kube, root), PodFinalizer(kube)
    runner = await serve_health(provisioner, finalizer, port)

    async def both() -> None:
        await asyncio.gather(provisioner.run(), finalizer.run())

    await run_until_stopped(both())
    await runner.cleanup()
    await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True, help="the provisioner's identity")
    parser.add_argument("--root", type=Path, required=True, help="where the volumes' directories live")
    parser.add_argument("--port", type=int, required=True, help="port of /healthz on 127.0.0.1")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    asyncio.run(run(args.kubeconfig, args.root, args.port))


if __name__ == "__main__":
    main()
