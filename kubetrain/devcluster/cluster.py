"""Bring the local cluster up, report on it, and take it down.

The order is the one a real control plane needs: etcd, the API server, then the
scheduler, the controller manager and kwok (which all talk to the API server),
then the simulated nodes. Each component is waited for on its health endpoint;
if one fails, the ones already started are stopped again and the error names
the component and shows the end of its log.

Everything a cluster owns lives in one state dir: ``state.json`` (ports, pids),
``pki/``, ``logs/``, ``etcd/`` and the kubeconfigs. ``down`` stops the pids
recorded there and removes the dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console

from kubetrain import naming
from kubetrain.devcluster import airflow_state, build, kueue, nodes, objectstore, paths, pki, process
from kubetrain.devcluster.errors import DevClusterError
from kubetrain.devcluster.process import Component, HealthCheck
from kubetrain.devcluster.processnode import containers, interpreter
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import NODES

# Controllers of kube-controller-manager the dev cluster runs: owner-reference
# garbage collection, namespace deletion, default service accounts, the
# finalizers that protect pod groups, claims and volumes in use (without them a
# deleted claim, and so its namespace, would wait forever), binding claims
# to volumes, folding aggregated ClusterRoles (kubetrain-edit) into `edit`,
# Deployments (the controller's own install rolls out here as on any cluster),
# and the pod garbage collector: a DELETE of an unscheduled pod cut off between
# the API server's two steps (mark deleting, then remove) leaves a pod no
# kubelet will remove, and on a real cluster that collector deletes it.
KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "podgroup-protection-controller",
    "clusterrole-aggregation-controller",
    "deployment-controller",
    "replicaset-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)
# The native gang-scheduling API of the chosen release (see build.py).
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"


@dataclass
class ClusterOptions:
    """What ``kubetrain dev up`` was asked for."""

    gpu_nodes: int = 2
    gpus_per_node: int = 8
    cpu_nodes: int = 1
    apiserver_port: int | None = None
    process_node: bool = True
    process_node_gpus: int = 0
    # Pods that name no node run on the process node, not on a simulated one (nodes.py says how).
    process_node_default: bool = False
    # Kueue's manager runs beside the control plane (kueue.py says what it installs).
    kueue: bool = False
    # Kueue's waitForPodsReady timeout in seconds (None: off), with --kueue only.
    kueue_pods_ready_timeout: float | None = None
    # MultiKueue's workerLostTimeout in seconds (None: Kueue's 15 minutes), with --kueue only.
    kueue_worker_lost_timeout: float | None = None
    # A real S3 server beside the control plane (objectstore.py says why).
    object_store: bool = False
    workdir: str = field(default_factory=lambda: str(Path.cwd()))
    # The Python the process node's pods run with (None: chosen by `up`, processnode/interpreter.py).
    pod_python: str | None = None

    def validate(self) -> None:
        for name in ("gpu_nodes", "gpus_per_node", "cpu_nodes", "process_node_gpus"):
            value = getattr(self, name)
            if value < 0:
                flag = "--" + name.replace("_", "-")
                raise DevClusterError(f"{flag} must be >= 0 (got {value})")
        if self.apiserver_port is not None and not 1 <= self.apiserver_port <= 65535:
            raise DevClusterError(f"--port must be between 1 and 65535 (got {self.apiserver_port})")
        if self.process_node_default and not self.process_node:
            raise DevClusterError(
                "--process-node-default needs the process node: drop --no-process-node, "
                "or drop --process-node-default to let simulated nodes take every pod"
            )
        for name in ("kueue_pods_ready_timeout", "kueue_worker_lost_timeout"):
            seconds = getattr(self, name)
            if seconds is not None and (not self.kueue or seconds <= 0):
                flag = "--" + name.replace("_", "-")
                raise DevClusterError(
                    f"{flag} needs --kueue and a number of seconds > 0 (got {seconds} with kueue={self.kueue})"
                )

    def binaries(self) -> list[str]:
        """The built binaries a cluster with these options runs."""
        optional = {"kueue": self.kueue, "versitygw": self.object_store}
        return [name for name in build.BINARIES if optional.get(name, True)]

    def runs(self, component: str) -> bool:
        """Whether a cluster with these options runs ``component`` (one of ``COMPONENTS``)."""
        optional = {"process-node": self.process_node, "kueue": self.kueue, "object-store": self.object_store}
        return optional.get(component, True)


@dataclass
class ClusterState:
    """What ``state.json`` records about a running cluster."""

    ports: dict[str, int]
    pids: dict[str, int]
    options: dict[str, Any]
    started_at: float
    startup_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"


@dataclass(frozen=True)
class ComponentStatus:
    """One line of ``kubetrain dev status``."""

    name: str
    pid: int | None
    port: int | None
    running: bool
    healthy: bool


COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kwok",
    "provisioner",
    "object-store",
    "process-node",
    "kueue",
)
# Ports of a component beside the one its health is probed on (``ClusterState.ports``).
KUEUE_PORTS = ("kueue-webhook", "kueue-metrics")
PROCESS_NODE = naming.PROCESS_NODE


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _down(state: ClusterState) -> list[str]:
    """The components of ``state`` whose process is gone."""
    return [name for name, pid in state.pids.items() if name in COMPONENTS and not process.pid_alive(pid)]


class DevCluster:
    """A local cluster rooted at one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.layout = paths.StateLayout(state_dir)
        self.pki = pki.Pki(state_dir / "pki")

    # -- paths -----------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig people and tests use."""
        return self.state_dir / "kubeconfig"

    @property
    def process_node_dir(self) -> Path:
        """The process node's state: its pods' files in ``pods/<uid>``."""
        return self.state_dir / "process-node"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """Run the built kubectl on this cluster as its admin: its output, or ``DevClusterError`` with
        what kubectl said."""
        done = subprocess.run(
            [str(build.binary_path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
        if done.returncode != 0:
            raise DevClusterError(f"kubectl {' '.join(args[:3])} failed: {done.stderr.strip()}")
        return done.stdout

    def log_path(self, component: str) -> Path:
        return self.layout.log(component)

    def _component_kubeconfig(self, identity: str) -> Path:
        return self.state_dir / f"{identity}.kubeconfig"

    # -- state -----------------------------------------------------------------
    def load_state(self) -> ClusterState | None:
        return paths.read_state(self.layout.state_file, ClusterState, "kubetrain dev down")

    def _save_state(self, state: ClusterState) -> None:
        paths.write_state(self.layout.state_file, state)

    def is_up(self) -> bool:
        state = self.load_state()
        return state is not None and not _down(state)

    def adopt(self, name: str, pid: int) -> None:
        """Record a process started beside the cluster (the demo's controller) so ``down`` stops it too."""
        state = self.load_state()
        if state is None:
            raise DevClusterError(
                f"no cluster in {self.state_dir} to attach {name} to; run `kubetrain dev up`"
            )
        state.pids[name] = pid
        self._save_state(state)

    def release(self, name: str) -> None:
        """Stop a process started beside the cluster with ``adopt`` and forget it."""
        state = self.load_state()
        if state is None or name not in state.pids or name in COMPONENTS:
            return
        process.stop(state.pids.pop(name))
        self._save_state(state)

    # -- components ------------------------------------------------------------
    def _components(self, ports: dict[str, int], options: ClusterOptions) -> list[Component]:
        bins = {name: str(build.binary_path(name)) for name in options.binaries()}
        admin_token = self.pki.token("admin")
        etcd_url = f"https://127.0.0.1:{ports['etcd']}"
        peer_url = f"https://127.0.0.1:{ports['etcd-peer']}"
        stages = resources.files("kubetrain.devcluster").joinpath("stages", "kwok-stages.yaml")
        stage_file = self.state_dir / "kwok-stages.yaml"
        stage_file.write_text(stages.read_text())

        def kubeconfig_flags(identity: str) -> list[str]:
            path = str(self._component_kubeconfig(identity))
            return [
                f"--kubeconfig={path}",
                f"--authentication-kubeconfig={path}",
                f"--authorization-kubeconfig={path}",
            ]

        def secure_health(name: str) -> HealthCheck:
            return HealthCheck(f"https://127.0.0.1:{ports[name]}/healthz", insecure=True)

        always_allow = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
        return [
            Component(
                "etcd",
                [
                    bins["etcd"],
                    "--name=node0",
                    f"--data-dir={self.state_dir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=node0={peer_url}",
                    # TLS on both ports, and only clients with a certificate of etcd's own CA: the
                    # API server's (pki.py says why).
                    f"--cert-file={self.pki.etcd_cert}",
                    f"--key-file={self.pki.etcd_key}",
                    "--client-cert-auth",
                    f"--trusted-ca-file={self.pki.etcd_ca_cert}",
                    f"--peer-cert-file={self.pki.etcd_cert}",
                    f"--peer-key-file={self.pki.etcd_key}",
                    "--peer-client-cert-auth",
                    f"--peer-trusted-ca-file={self.pki.etcd_ca_cert}",
                    "--unsafe-no-fsync",
                    "--quota-backend-bytes=4294967296",
                    "--auto-compaction-retention=1",
                    "--log-level=warn",
                ],
                _etcd_health(etcd_url, self.pki),
                ports["etcd"],
                startup_timeout=30,
            ),
            Component(
                "kube-apiserver",
                [
                    bins["kube-apiserver"],
                    f"--etcd-servers={etcd_url}",
                    f"--etcd-cafile={self.pki.etcd_ca_cert}",
                    f"--etcd-certfile={self.pki.etcd_client_cert}",
                    f"--etcd-keyfile={self.pki.etcd_client_key}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={ports['kube-apiserver']}",
                    f"--tls-cert-file={self.pki.serving_cert}",
                    f"--tls-private-key-file={self.pki.serving_key}",
                    f"--client-ca-file={self.pki.ca_cert}",
                    f"--requestheader-client-ca-file={self.pki.ca_cert}",
                    "--requestheader-allowed-names=front-proxy-client",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--kubelet-client-certificate={self.pki.kubelet_client_cert}",
                    f"--kubelet-client-key={self.pki.kubelet_client_key}",
                    f"--kubelet-certificate-authority={self.pki.ca_cert}",
                    "--kubelet-preferred-address-types=InternalIP,Hostname",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={self.pki.sa_pub}",
                    f"--service-account-signing-key-file={self.pki.sa_key}",
                    f"--token-auth-file={self.pki.tokens}",
                    "--authorization-mode=Node,RBAC",
                    "--anonymous-auth=false",
                    "--allow-privileged=true",
                    "--endpoint-reconciler-type=none",
                    "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
                    "--disable-admission-plugins=TaintNodesByCondition",
                    f"--feature-gates={FEATURE_GATES}",
                    f"--runtime-config={RUNTIME_CONFIG}",
                    "--profiling=false",
                ],
                HealthCheck(
                    f"https://127.0.0.1:{ports['kube-apiserver']}/readyz",
                    token=admin_token,
                    ca_file=self.pki.ca_cert,
                ),
                ports["kube-apiserver"],
                startup_timeout=90,
            ),
            Component(
                "kube-scheduler",
                [
                    bins["kube-scheduler"],
                    *kubeconfig_flags("scheduler"),
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['kube-scheduler']}",
                    always_allow,
                    "--leader-elect=false",
                    f"--feature-gates={FEATURE_GATES}",
                ],
                secure_health("kube-scheduler"),
                ports["kube-scheduler"],
            ),
            Component(
                "kube-controller-manager",
                [
                    bins["kube-controller-manager"],
                    *kubeconfig_flags("controller-manager"),
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['kube-controller-manager']}",
                    always_allow,
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={self.pki.sa_key}",
                    f"--root-ca-file={self.pki.ca_cert}",
                    f"--controllers={','.join(KCM_CONTROLLERS)}",
                    f"--feature-gates={FEATURE_GATES}",
                ],
                secure_health("kube-controller-manager"),
                ports["kube-controller-manager"],
            ),
            Component(
                "kwok",
                [
                    bins["kwok"],
                    f"--kubeconfig={self._component_kubeconfig('kwok')}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}=fake",
                    "--node-lease-duration-seconds=40",
                    f"--cidr={POD_CIDR}",
                    "--node-ip=127.0.0.1",
                    f"--server-address=127.0.0.1:{ports['kwok']}",
                    f"--config={stage_file}",
                ],
                HealthCheck(f"http://127.0.0.1:{ports['kwok']}/healthz"),
                ports["kwok"],
            ),
            Component(
                "provisioner",
                [
                    sys.executable,
                    "-m",
                    "kubetrain.devcluster.provisioner",
                    f"--kubeconfig={self._component_kubeconfig('provisioner')}",
                    f"--root={self.state_dir / 'volumes'}",
                    f"--port={ports['provisioner']}",
                ],
                HealthCheck(f"http://127.0.0.1:{ports['provisioner']}/healthz"),
                ports["provisioner"],
            ),
            *([self._object_store(bins["versitygw"])] if options.object_store else []),
            *([self._process_node(ports, options)] if options.process_node else []),
            *([self._kueue(ports, options, bins["kueue"])] if options.kueue else []),
        ]

    def object_store(self) -> objectstore.ObjectStore | None:
        """The S3 server of a cluster started with ``--object-store``: where it is, its credentials."""
        return objectstore.Layout(self.state_dir).load()

    def _object_store(self, binary: str) -> Component:
        layout = objectstore.Layout(self.state_dir)
        store = layout.load()
        if store is None:
            raise DevClusterError(
                f"no object store credentials in {layout.credentials}; run `kubetrain dev up`"
            )
        argv = objectstore.command(binary, store, layout.data)
        health = objectstore.S3Answers(store.endpoint)
        return Component(objectstore.NAME, argv, health, store.port, env=objectstore.server_env(store))

    @property
    def _kueue_dir(self) -> Path:
        return self.state_dir / "kueue"

    def _kueue(self, ports: dict[str, int], options: ClusterOptions, binary: str) -> Component:
        from kubetrain.devcluster import certs  # only `up` makes keys (see certs)

        cert_dir = self._kueue_dir / "certs"
        etc = self._kueue_dir / "etc"  # laid over /etc for Kueue alone (kueue.py says why)
        metrics_certs = etc / kueue.METRICS_CERTS.relative_to("/etc")
        for folder, name in ((cert_dir, "kueue-webhook"), (metrics_certs, "kueue-metrics")):
            folder.mkdir(parents=True, exist_ok=True)
            if not (folder / "tls.crt").exists():
                certs.sign_serving_cert(
                    self.pki, name=name, cert_path=folder / "tls.crt", key_path=folder / "tls.key"
                )
        (self._kueue_dir / "etc-work").mkdir(exist_ok=True)
        config = kueue.configuration(
            webhook_port=ports["kueue-webhook"],
            health_port=ports["kueue"],
            metrics_port=ports["kueue-metrics"],
            cert_dir=cert_dir,
            pods_ready_timeout=options.kueue_pods_ready_timeout,
            worker_lost_timeout=options.kueue_worker_lost_timeout,
        )
        config_file = self._kueue_dir / "config.yaml"
        config_file.write_text(json.dumps(config, indent=2))
        return Component(
            "kueue",
            kueue.in_private_etc(
                [
                    binary,
                    f"--config={config_file}",
                    f"--kubeconfig={self._component_kubeconfig('kueue')}",
                ],
                upper=etc,
                work=self._kueue_dir / "etc-work",
            ),
            HealthCheck(f"http://127.0.0.1:{ports['kueue']}/readyz"),
            ports["kueue"],
            startup_timeout=120,
        )

    def _install_kueue(self, ports: dict[str, int]) -> None:
        kueue.install(
            kubectl=self.kubectl,
            workdir=self._kueue_dir,
            webhook_port=ports["kueue-webhook"],
            ca_bundle=self.pki.ca_cert.read_bytes(),
        )

    def _process_node(self, ports: dict[str, int], options: ClusterOptions) -> Component:
        from kubetrain.devcluster import certs  # only `up` makes keys (see certs)

        cert, key = self.pki.root / "process-node.crt", self.pki.root / "process-node.key"
        certs.sign_serving_cert(self.pki, name=PROCESS_NODE, cert_path=cert, key_path=key)
        return Component(
            "process-node",
            [
                sys.executable,
                "-m",
                "kubetrain.devcluster.processnode",
                f"--name={PROCESS_NODE}",
                f"--state-dir={self.process_node_dir}",
                f"--kubeconfig={self._component_kubeconfig('process-node')}",
                f"--port={ports['process-node']}",
                f"--cert={cert}",
                f"--key={key}",
                f"--ca={self.pki.ca_cert}",
                f"--workdir={options.workdir}",
                f"--gpus={options.process_node_gpus}",
                f"--pod-python={options.pod_python or sys.executable}",
                f"--hide={self.state_dir}",  # its keys, tokens and etcd's data (docs/process-node.md)
                *(["--default-node"] if options.process_node_default else []),
            ],
            HealthCheck(f"https://127.0.0.1:{ports['process-node']}/healthz", ca_file=self.pki.ca_cert),
            ports["process-node"],
        )

    def _write_kubeconfigs(self, server: str) -> None:
        for identity in pki.IDENTITIES:
            text = pki.kubeconfig(
                server=server,
                ca_cert=self.pki.ca_cert,
                token=self.pki.token(identity.name),
                user=identity.user,
            )
            target = (
                self.kubeconfig if identity.name == "admin" else self._component_kubeconfig(identity.name)
            )
            target.write_text(text)
            target.chmod(0o600)

    # -- lifecycle ---------------------------------------------------------------
    def up(self, options: ClusterOptions, *, console: Console | None = None) -> ClusterState:
        """Start every component and the simulated nodes; raises ``DevClusterError`` on any fault."""
        console = console or Console(stderr=True)
        options.validate()
        existing = paths.still_running(
            self.load_state(), self.is_up, self.state_dir, "the dev cluster", "kubetrain dev", console=console
        )
        if existing is not None:
            return existing
        for name in options.binaries():
            build.binary_path(name)
        if options.apiserver_port is not None and _port_in_use(options.apiserver_port):
            raise DevClusterError(
                f"port {options.apiserver_port} is already in use on 127.0.0.1; pass another --port "
                "or stop the process that holds it"
            )
        if self.state_dir.exists() and any(self.state_dir.iterdir()):
            raise DevClusterError(
                f"state dir {self.state_dir} is not empty but holds no cluster state; remove it or run "
                "`kubetrain dev down`"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        wanted = [c for c in COMPONENTS[1:] if options.runs(c)]
        extra = KUEUE_PORTS if options.kueue else ()
        ports = {name: process.free_port() for name in ("etcd", "etcd-peer", *wanted, *extra)}
        if options.apiserver_port is not None:
            ports["kube-apiserver"] = options.apiserver_port
        self._prepare(options, ports, console)
        state = ClusterState(ports=ports, pids={}, options=asdict(options), started_at=time.time())
        started = time.monotonic()
        with console.status("generating keys and certificates"):
            from kubetrain.devcluster import certs  # only `up` makes keys (see certs)

            certs.generate(self.pki.root)
            self._write_kubeconfigs(state.server)
        self._save_state(state)
        try:
            for component in self._components(ports, options):
                if component.name == "kueue":
                    with console.status("installing Kueue's CRDs and webhooks"):
                        self._install_kueue(ports)
                with console.status(f"starting {component.name} on 127.0.0.1:{component.port}"):
                    proc = process.start(component, self.log_path(component.name))
                    state.pids[component.name] = proc.pid
                    self._save_state(state)
                    waited = process.wait_healthy(component, proc, self.log_path(component.name))
                state.startup_seconds[component.name] = round(waited, 2)
                console.print(
                    f"  [green]✓[/] {component.name:<24} pid {proc.pid:<8} 127.0.0.1:{component.port}"
                    f"  ({waited:.1f}s)"
                )
            with console.status("registering simulated nodes"):
                node_list = nodes.fake_nodes(
                    gpu_nodes=options.gpu_nodes,
                    gpus_per_node=options.gpus_per_node,
                    cpu_nodes=options.cpu_nodes,
                    tainted=options.process_node_default,
                )
                asyncio.run(_register_nodes(self.kubeconfig, node_list))
            console.print(
                f"  [green]✓[/] {len(node_list)} simulated nodes Ready "
                f"({options.gpu_nodes} with {options.gpus_per_node} GPUs each, {options.cpu_nodes} CPU-only)"
            )
        except BaseException:
            self._tear_down(state.pids)
            raise
        state.startup_seconds["total"] = round(time.monotonic() - started, 2)
        self._save_state(state)
        return state

    def _prepare(self, options: ClusterOptions, ports: dict[str, int], console: Console) -> None:
        """What the optional components need before they start: the pods' Python (recorded in the
        options), the object store's bucket and credentials."""
        if options.process_node:
            choice = interpreter.choose(
                options.pod_python or os.environ.get(interpreter.ENV),
                interpreter.candidates(Path(options.workdir)),
            )
            options.pod_python = choice.python
            if choice.warning:
                console.print(f"[yellow]warning:[/] {choice.warning}", highlight=False)
        if options.object_store:
            objectstore.Layout(self.state_dir).prepare(ports[objectstore.NAME])

    def pod_python(self) -> str | None:
        """The Python the process node's pods run with, as the running cluster was started."""
        state = self.load_state()
        return None if state is None else state.options.get("pod_python")

    def restart(self, name: str, *, down_for: float = 0.0) -> float:
        """Stop one component and start it again on the same port with the same flags, as after a
        crash or an upgrade (the fault suite restarts the API server mid-run); returns the seconds it
        took to become healthy again. The component itself may have died (that is when one restarts
        it); the others must be running."""
        state = self.load_state()
        if state is None:
            raise DevClusterError(f"no running cluster in {self.state_dir}; run `kubetrain dev up`")
        if name not in state.pids or name not in COMPONENTS:
            raise DevClusterError(f"unknown component {name!r}; choose from {', '.join(state.pids)}")
        down = [n for n in _down(state) if n != name]
        if down:
            raise DevClusterError(
                f"cannot restart {name} alone: also down in {self.state_dir}: {', '.join(down)}; "
                "run `kubetrain dev down`, then `kubetrain dev up`"
            )
        options = ClusterOptions(**state.options)
        component = next(c for c in self._components(state.ports, options) if c.name == name)
        process.stop(state.pids[name])
        time.sleep(down_for)
        proc = process.start(component, self.log_path(name))
        state.pids[name] = proc.pid
        self._save_state(state)
        return process.wait_healthy(component, proc, self.log_path(name))

    @property
    def _deployments_file(self) -> Path:
        return self.state_dir / "airflow-deployments"

    def add_deployment(self, root: Path) -> None:
        """Note an Airflow deployment started beside this cluster, so ``down`` stops it too, wherever
        its directory is (``--airflow-dir``)."""
        known = self.deployments()
        if root.resolve() not in known:
            with self._deployments_file.open("a") as out:
                out.write(f"{root.resolve()}\n")

    def deployments(self) -> list[Path]:
        """The directories of the Airflow deployments started beside this cluster (``airflow/`` in its
        state dir, and those ``add_deployment`` noted)."""
        noted = self._deployments_file.read_text().splitlines() if self._deployments_file.exists() else []
        return list(dict.fromkeys([(self.state_dir / "airflow").resolve(), *(Path(p) for p in noted if p)]))

    def down(self) -> bool:
        """Stop every component (and the Airflow deployments started beside it) and remove the state
        dir; returns whether anything was there."""
        for root in self.deployments():
            if airflow_state.load_state(root) is not None:  # a noted directory reused since is not touched
                airflow_state.tear_down(root)
        state = self.load_state()
        return self._tear_down(state.pids if state else {})

    def _tear_down(self, pids: Mapping[str, int]) -> bool:
        """Stop the components, then any container of the process node that outlived it (a node that
        did not stop within its grace period was SIGKILLed, and cannot stop them), and remove the
        state dir."""
        pods = self.process_node_dir / "pods"
        return process.tear_down(self.state_dir, pids, then=lambda: containers.stop_leftovers(pods))

    def status(self) -> list[ComponentStatus]:
        """Pid, port and health of each component."""
        state = self.load_state()
        if state is None:
            return []
        token = self.pki.token("admin")
        result = []
        for component in (c for c in COMPONENTS if c in state.ports):
            pid = state.pids.get(component)
            port = state.ports.get(component)
            running = pid is not None and process.pid_alive(pid)
            healthy = running and _health_for(component, port, token, self.pki).probe()
            result.append(ComponentStatus(component, pid, port, running, healthy))
        return result


def _etcd_health(url: str, keys: pki.Pki) -> HealthCheck:
    """etcd's health, asked with the API server's client certificate (the only one etcd takes)."""
    return HealthCheck(
        f"{url}/health",
        ca_file=keys.etcd_ca_cert,
        client_cert=keys.etcd_client_cert,
        client_key=keys.etcd_client_key,
    )


def _health_for(component: str, port: int | None, token: str, keys: pki.Pki) -> process.Probe:
    local = f"127.0.0.1:{port}"
    ca = keys.ca_cert
    probes: dict[str, Callable[[], process.Probe]] = {
        "etcd": lambda: _etcd_health(f"https://{local}", keys),
        "kube-apiserver": lambda: HealthCheck(f"https://{local}/readyz", token=token, ca_file=ca),
        "kwok": lambda: HealthCheck(f"http://{local}/healthz"),
        "provisioner": lambda: HealthCheck(f"http://{local}/healthz"),
        "kueue": lambda: HealthCheck(f"http://{local}/readyz"),
        "process-node": lambda: HealthCheck(f"https://{local}/healthz", ca_file=ca),
        objectstore.NAME: lambda: objectstore.S3Answers(f"http://{local}"),
    }
    return probes.get(component, lambda: HealthCheck(f"https://{local}/healthz", insecure=True))()


async def _register_nodes(kubeconfig: Path, node_list: list[dict[str, Any]], timeout: float = 60) -> None:
    """Create the simulated nodes and wait until kwok reports each one Ready."""
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        for node in node_list:
            try:
                await kube.create(NODES, node)
            except errors.APIConflictError:
                pass  # already registered is fine
            except errors.APIError as exc:
                raise DevClusterError(f"registering node {node['metadata']['name']} failed: {exc}") from exc
        wanted = {n["metadata"]["name"] for n in node_list}
        deadline = time.monotonic() + timeout
        while True:
            listed, _ = await kube.list(NODES)
            ready = {
                n["metadata"]["name"]
                for n in listed
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
            }
            if wanted <= ready:
                return
            if time.monotonic() > deadline:
                raise DevClusterError(
                    f"simulated nodes not Ready after {timeout:.0f}s: {sorted(wanted - ready)}; "
                    "see `kubetrain dev logs kwok`"
                )
            await asyncio.sleep(0.2)
    finally:
        await kube.close()
