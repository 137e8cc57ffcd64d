"""The mpi ML policy: a launcher and nodes that reach each other over SSH, as upstream's MPI runtime.

An SSH key Secret (generated once, immutable) mounted into the launcher and
every node, a hostfile ConfigMap listing the nodes with their slots mounted into
the launcher, and the ``OMPI_MCA_*`` settings that make ``mpirun`` read it.
"""

from __future__ import annotations

import base64

from kubetrain.api.objects import Obj
from kubetrain.kube.resources import CONFIGMAPS, SECRETS
from kubetrain.kube.strategic import upsert_env
from kubetrain.trainjob.policies.common import gpus_per_node, node_resources
from kubetrain.trainjob.state import NODE, Extra, PodSet, TrainJobInfo

HOSTFILE_DIR = "/etc/mpi"


class MPI:
    name = "mpi"

    def apply(self, info: TrainJobInfo) -> None:
        policy = info.ml_policy.get("mpi") or {}
        launcher = info.trainer()
        if launcher is None:
            return
        nodes = info.pod_set(NODE)
        nodes = None if nodes is launcher else nodes
        as_node = bool(policy.get("runLauncherAsNode"))
        _size(info, launcher, nodes, as_node)
        slots = _slots(info, launcher, policy)
        secret, hostfile = f"{info.name}-mpi-ssh-auth", f"{info.name}-mpi-hostfile"
        hosts = _hosts(info, launcher, nodes, as_node)
        info.extras.append(Extra(SECRETS, secret, lambda: _ssh_secret(info, secret)))
        info.extras.append(Extra(CONFIGMAPS, hostfile, lambda: _hostfile(info, hostfile, hosts, slots)))
        _mount_ssh_key(launcher, nodes, secret, str(policy.get("sshAuthMountPath") or "/root/.ssh"))
        _mount_hostfile(launcher, hostfile, slots)


def _size(info: TrainJobInfo, launcher: PodSet, nodes: PodSet | None, as_node: bool) -> None:
    """One launcher; ``numNodes`` nodes, of which the launcher is one when it runs as a node."""
    num_nodes = int((info.spec.get("trainer") or {}).get("numNodes") or info.ml_policy.get("numNodes") or 1)
    launcher.count = 1
    if nodes is not None:
        nodes.count = max(1, num_nodes - 1) if as_node else num_nodes


def _slots(info: TrainJobInfo, launcher: PodSet, policy: Obj) -> int:
    """Processes per node: the TrainJob's ``numProcPerNode``, else the runtime's, else a node's GPUs."""
    requested = (info.spec.get("trainer") or {}).get("numProcPerNode")
    runtime_slots = int(policy.get("numProcPerNode") or 1)
    gpus = gpus_per_node(node_resources(info, launcher))
    return int(requested) if requested else (gpus if runtime_slots == 1 and gpus > 1 else runtime_slots)


def _hosts(info: TrainJobInfo, launcher: PodSet, nodes: PodSet | None, as_node: bool) -> list[str]:
    hosts = [info.endpoint(launcher.name)] if as_node or nodes is None else []
    if nodes is not None:
        hosts += [info.endpoint(nodes.name, 0, i) for i in range(nodes.count)]
    return hosts


def _hostfile(info: TrainJobInfo, name: str, hosts: list[str], slots: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": [info.owner_reference()]},
        "data": {"hostfile": "".join(f"{h} slots={slots}\n" for h in hosts)},
    }


def _mount_ssh_key(launcher: PodSet, nodes: PodSet | None, secret: str, path: str) -> None:
    volume = {
        "name": "mpi-ssh-auth",
        "secret": {
            "secretName": secret,
            "defaultMode": 0o400,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
            ],
        },
    }
    for pod_set in (launcher, nodes):
        if pod_set is None:
            continue
        pod_set.template.setdefault("spec", {}).setdefault("volumes", []).append(dict(volume))
        container = pod_set.container(NODE)
        if container is not None:
            container.setdefault("volumeMounts", []).append({"name": "mpi-ssh-auth", "mountPath": path})


def _mount_hostfile(launcher: PodSet, hostfile: str, slots: int) -> None:
    launcher.template.setdefault("spec", {}).setdefault("volumes", []).append(
        {
            "name": "mpi-hostfile",
            "configMap": {
                "name": hostfile,
                "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
            },
        }
    )
    container = launcher.container(NODE)
    if container is None:
        return
    container.setdefault("volumeMounts", []).append({"name": "mpi-hostfile", "mountPath": HOSTFILE_DIR})
    upsert_env(
        container,
        [
            {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{HOSTFILE_DIR}/hostfile"},
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
            {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
        ],
    )


def _ssh_secret(info: TrainJobInfo, name: str) -> Obj:
    """An immutable ssh-auth Secret with a fresh ECDSA P-521 key pair (created once, never updated)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "immutable": True,
        "metadata": {"name": name, "ownerReferences": [info.owner_reference()]},
        "data": {
            "ssh-privatekey": base64.b64encode(private).decode(),
            "ssh-publickey": base64.b64encode(public).decode(),
        },
    }
