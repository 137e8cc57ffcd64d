"""The process node: a Node that runs the pods bound to it as local processes.

What a training job sees is what a kubelet would give it: a Ready Node with
capacity from this host (and GPUs, real or configured), pods that go through
their phases with exit codes, restarts and termination messages, ``kubectl
logs`` with follow, tail, previous and container selection, and peers reachable
by their service names. It is a development tool: it listens on loopback only,
talks only to its own cluster's API server, and its log endpoint accepts only
clients with a certificate from that cluster's CA (the API server).

Everything a pod needs lives under ``<state>/pods/<uid>``; a claim's volume is the
directory the dev cluster's provisioner made for it (``kubetrain.devcluster.provisioner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import shutil
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain import naming
from kubetrain.devcluster.processnode import confine, containers, isolation, logserver, network
from kubetrain.devcluster.processnode.gpus import GpuAllocator, detect_gpus
from kubetrain.devcluster.processnode.pods import PodServices, PodWorker
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import CONFIGMAPS, LEASES, PODS, SECRETS, SERVICES, Resource

log = logging.getLogger(__name__)
Obj = dict[str, Any]

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NODE_LABEL = naming.LABEL_PROCESS_NODE
NODE_TAINT = {"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}
HEARTBEAT_SECONDS = 10
LEASE_SECONDS = 40


@dataclass
class Settings:
    """How the process node was started (``python -m kubetrain.devcluster.processnode --help``)."""

    name: str
    state_dir: Path
    port: int
    cert: Path
    key: Path
    ca: Path
    workdir: Path
    api_server: str
    fake_gpus: int = 0
    # Untainted, so pods that name no node run here (the simulated nodes carry a taint instead).
    default_node: bool = False
    # The Python pods run with: its directory comes first on their PATH (interpreter.py says why).
    pod_python: str = sys.executable
    # Directories pods must not see (the cluster's state dir: its keys, tokens, etcd's data).
    hide: list[Path] = field(default_factory=list)


def _memory_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 8 * 2**30


class Agent:
    def __init__(self, settings: Settings, kube: KubeClient) -> None:
        self.settings = settings
        self.kube = kube
        self.addresses = network.AddressPool()
        real = detect_gpus()
        self.gpus = GpuAllocator(real)
        self.gpu_count = len(real) or settings.fake_gpus
        self.pods = Informer(kube, PODS, field_selector=f"spec.nodeName={settings.name}")
        self.services = Informer(kube, SERVICES)
        self.workers: dict[str, PodWorker] = {}
        self.resolver = network.Resolver(
            pods=lambda: (w.pod for w in self.workers.values()),
            services=self.services.objects,
            address_of=lambda pod: self.addresses.get(pod["metadata"]["uid"]),
        )
        self.pods.add_handler(self._on_pod)
        self._runtime_bin = str(Path(settings.pod_python).parent)
        self.netshim: Path | None = None  # the port isolation library, once built
        self.confinement: list[str] = []  # what containers start through, once checked (``confined``)

    @property
    def pods_dir(self) -> Path:
        """Each pod's files are in ``<pods_dir>/<uid>``."""
        return self.settings.state_dir / "pods"

    # -- what pods get ---------------------------------------------------------------------------
    def base_env(self, home: Path) -> dict[str, str]:
        """The env every container starts from (its own env overrides it); ``home`` is its pod's dir."""
        host, _, port = self.settings.api_server.removeprefix("https://").partition(":")
        return {
            "PATH": f"{self._runtime_bin}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            # Collective backends talk over loopback, where every pod of this node lives.
            "GLOO_SOCKET_IFNAME": "lo",
            "NCCL_SOCKET_IFNAME": "lo",
        }

    def confined(self, keep: list[Path]) -> list[str]:
        """The wrapper a container starts through so that it cannot see ``settings.hide``, but for
        ``keep`` (its pod's own files); none where the host does not allow it (``_check_confinement``)."""
        if not self.confinement:
            return []
        # Absolute: confine.py runs in the container's working directory, the node in its own.
        return [*self.confinement, *(arg for path in keep for arg in ("--keep", str(path.resolve()))), "--"]

    def _check_confinement(self) -> list[str]:
        """``confine``'s command with the hidden directories, if it works on this host; else [] and
        a warning: the pods then read whatever the node's user reads."""
        if not self.settings.hide:
            return []
        command = [
            sys.executable,
            "-I",
            "-S",
            confine.__file__,
            *(arg for path in self.settings.hide for arg in ("--hide", str(path.resolve()))),
        ]
        done = subprocess.run([*command, "--check"], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            log.warning(
                "pods can read %s (the cluster's keys and tokens): this host does not let the node hide it "
                "from them: %s",
                ", ".join(map(str, self.settings.hide)),
                done.stderr.strip() or f"exit code {done.returncode}",
            )
            return []
        log.info("pods run with %s out of their sight", ", ".join(map(str, self.settings.hide)))
        return command

    def pod_services(self) -> PodServices:
        """What a pod worker gets of this node (the port shim and confinement as ``run`` found them)."""
        return PodServices(
            kube=self.kube,
            addresses=self.addresses,
            gpus=self.gpus,
            resolver=self.resolver,
            lookup=self.lookup,
            pods_dir=self.pods_dir,
            workdir=self.settings.workdir,
            base_env=self.base_env,
            netshim=self.netshim,
            confined=self.confined,
        )

    async def lookup(self, kind: str, namespace: str, name: str) -> Obj | None:
        resource = CONFIGMAPS if kind == "ConfigMap" else SECRETS
        return await self.kube.get(resource, name, namespace)

    # -- pods ------------------------------------------------------------------------------------
    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        uid = obj["metadata"]["uid"]
        worker = self.workers.get(uid)
        if new is None:
            if worker is not None:
                asyncio.get_running_loop().create_task(self._force_stop(uid))
            else:  # it had finished before the node last started: only its files are left
                asyncio.get_running_loop().create_task(self._remove_files(uid))
            return
        if worker is None:
            if new["metadata"].get("deletionTimestamp"):
                asyncio.get_running_loop().create_task(self._remove_unknown(new))
                return
            if (new.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            worker = PodWorker(self.pod_services(), new)
            self.workers[uid] = worker
            worker.start()
            log.info("running pod %s/%s (%s)", worker.namespace, worker.name, worker.address)
            return
        worker.update(new)
        if new["metadata"].get("deletionTimestamp") and not worker.deleting.is_set():
            grace = new["metadata"].get("deletionGracePeriodSeconds")
            if grace is None:
                grace = new["spec"].get("terminationGracePeriodSeconds", 30)
            asyncio.get_running_loop().create_task(self._terminate(uid, float(grace)))

    async def _terminate(self, uid: str, grace: float) -> None:
        worker = self.workers.get(uid)
        if worker is None:
            return
        log.info("stopping pod %s/%s (grace %.0fs)", worker.namespace, worker.name, grace)
        await worker.terminate(grace)
        self.workers.pop(uid, None)

    async def _force_stop(self, uid: str) -> None:
        worker = self.workers.pop(uid, None)
        if worker is not None:
            worker.deleting.set()
            await asyncio.gather(*(c.runs[-1].stop(0) for c in [*worker.inits, *worker.mains] if c.runs))
            worker.close()

    async def _remove_unknown(self, pod: Obj) -> None:
        """A pod bound here that is being deleted, and that no worker runs (it never ran here, or an
        earlier run of the node ran it): remove it, and whatever files it has here."""
        meta = pod["metadata"]
        await self._remove_files(meta["uid"])
        with contextlib.suppress(errors.APIError):
            await self.kube.delete(
                PODS, meta["name"], meta["namespace"], uid=meta["uid"], grace_period_seconds=0
            )

    async def _remove_files(self, uid: str) -> None:
        await asyncio.to_thread(shutil.rmtree, self.pods_dir / uid, True)

    def _forget_pods_gone(self) -> None:
        """Remove the files of pods deleted while the node was down (``containers.stop_leftovers`` has
        stopped their processes); those of finished pods stay, with their logs."""
        bound = {pod["metadata"]["uid"] for pod in self.pods.objects()}
        for path in self.pods_dir.iterdir() if self.pods_dir.is_dir() else ():
            if path.name not in bound and path.name not in self.workers:
                shutil.rmtree(path, ignore_errors=True)

    # -- the node --------------------------------------------------------------------------------
    def node(self) -> Obj:
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": str(_memory_bytes()),
            "pods": "110",
            "ephemeral-storage": str(shutil.disk_usage(self.settings.state_dir).total),
        }
        labels = {
            "kubernetes.io/hostname": self.settings.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            NODE_LABEL: "true",
        }
        if self.gpu_count:
            capacity["nvidia.com/gpu"] = str(self.gpu_count)
            labels["nvidia.com/gpu.present"] = "true"
            labels["nvidia.com/gpu.count"] = str(self.gpu_count)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.settings.name, "labels": labels},
            "spec": {"taints": [] if self.settings.default_node else [NODE_TAINT]},
            "status": self._node_status(capacity),
        }

    def _node_status(self, capacity: dict[str, str]) -> Obj:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def condition(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        return {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.settings.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.settings.port}},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "process node"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "process node"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "process node"),
                condition("Ready", "True", "KubeletReady", "the process node runs pods as local processes"),
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "kubetrain process node",
                "kernelVersion": os.uname().release,
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "process://1",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
            },
        }

    async def register(self) -> None:
        node = self.node()
        try:
            await self.kube.create(NODES, node)
        except errors.APIConflictError:
            await self.kube.patch(
                NODES, self.settings.name, {"metadata": {"labels": node["metadata"]["labels"]}}
            )
        await self.kube.patch(NODES, self.settings.name, {"status": node["status"]}, subresource="status")

    async def heartbeat(self) -> None:
        """Renew the node's Lease every 10 s and its Ready condition every 40 s."""
        beats = 0
        while True:
            try:
                await self._renew_lease()
                if beats % (LEASE_SECONDS // HEARTBEAT_SECONDS) == 0:
                    node = self.node()
                    await self.kube.patch(
                        NODES, self.settings.name, {"status": node["status"]}, subresource="status"
                    )
            except errors.APIError as exc:
                log.warning("heartbeat failed: %s", exc)
            beats += 1
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def _renew_lease(self) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.settings.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now,
            },
        }
        try:
            await self.kube.patch(
                LEASES, self.settings.name, {"spec": body["spec"]}, namespace="kube-node-lease"
            )
        except errors.APINotFoundError:
            await self.kube.create(LEASES, body, "kube-node-lease")

    # -- running ---------------------------------------------------------------------------------
    async def run(self, ready: asyncio.Event | None = None) -> None:
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        left = await asyncio.to_thread(containers.stop_leftovers, self.pods_dir)
        if left:
            log.warning("stopped %d processes an earlier run of this node left running: %s", len(left), left)
        self.netshim = await asyncio.to_thread(isolation.build, self.settings.state_dir)
        self.confinement = await asyncio.to_thread(self._check_confinement)
        await self.register()
        self.services.start()
        await self.services.wait_synced()
        node_pods = logserver.NodePods(self.workers, self.pods.get, self.pods_dir)
        server = await logserver.serve(node_pods, self.settings.port, self._server_context())
        tasks = [asyncio.create_task(self.heartbeat())]
        self.pods.start()
        await self.pods.wait_synced()
        await asyncio.to_thread(self._forget_pods_gone)
        if ready is not None:
            ready.set()
        log.info(
            "process node %s ready on 127.0.0.1:%d with %d GPUs",
            self.settings.name,
            self.settings.port,
            self.gpu_count,
        )
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await self.shutdown()
            await server.cleanup()

    async def shutdown(self) -> None:
        """Stop every pod's processes (the cluster is going away; pod objects are left as they are)."""
        await asyncio.gather(
            *(c.runs[-1].stop(2) for w in self.workers.values() for c in [*w.inits, *w.mains] if c.runs)
        )
        await self.pods.stop()
        await self.services.stop()

    def _server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.settings.ca))
        context.load_cert_chain(str(self.settings.cert), str(self.settings.key))
        context.verify_mode = (
            ssl.CERT_OPTIONAL
        )  # /healthz is open; the log endpoints demand a client certificate
        return context
