"""TrainJob ML policies: the env, ports and pod counts that wire a runtime's ranks together.

One function per ``mlPolicy`` kind, each run once over the shared build state
(``TrainJobInfo``) after the TrainJob's own settings were applied, so the
policy's variables are upserted last (users cannot set them: the CRD rejects the
reserved names). What each sets is upstream's contract:

* torch: ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` for ``torchrun``, and port 29500;
* jax: ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``, ``JAX_COORDINATOR_ADDRESS``;
* xgboost: the ``DMLC_*`` tracker settings;
* mpi: an SSH key Secret and a hostfile ConfigMap, mounted into launcher and
  nodes, plus the ``OMPI_MCA_*`` launcher settings;
* none (plain): only the pod count of the trainer.
"""

from __future__ import annotations

from typing import Any

from kubetrain import naming, quantity
from kubetrain.controller.runtimes.framework import Obj
from kubetrain.controller.runtimes.trainjob import NODE, BuildError, Extra, PodSet, TrainJobInfo
from kubetrain.kube.resources import CONFIGMAPS, SECRETS
from kubetrain.kube.strategic import upsert_env

PORT = 29500
LAUNCHER = "launcher"
MPI_HOSTFILE_DIR = "/etc/mpi"


def apply(info: TrainJobInfo) -> None:
    policy = info.ml_policy
    if policy.get("torch") is not None:
        _torch(info)
    elif policy.get("jax") is not None:
        _jax(info)
    elif policy.get("xgboost") is not None:
        _xgboost(info)
    elif policy.get("mpi") is not None:
        _mpi(info)


def completion_index_env(name: str) -> Obj:
    """An env var holding the pod's completion index (its rank among the pods of its Job)."""
    path = f"metadata.annotations['{naming.JOB_COMPLETION_INDEX}']"
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def gpus_per_node(resources: Obj) -> int:
    """GPUs of one node: the first resource whose name contains 'gpu', from requests, else limits."""
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            if "gpu" in name.lower():
                count = quantity.ceil(value)
                if count:
                    return count
                break
    return 0


def cpus_per_node(resources: Obj) -> int:
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get("cpu")
        if value is not None and quantity.ceil(value) > 0:
            return quantity.ceil(value)
    return 0


def _node_resources(info: TrainJobInfo, trainer: PodSet) -> Obj:
    """One node's resources, checked: a value that is not a quantity names its field."""
    override = (info.spec.get("trainer") or {}).get("resourcesPerNode")
    where = (
        "spec.trainer.resourcesPerNode"
        if override
        else f"the resources of container {NODE} of the runtime's replicated job {trainer.name}"
    )
    resources = dict(override or (trainer.container(NODE) or {}).get("resources") or {})
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            try:
                quantity.ceil(value)
            except ValueError as exc:
                raise BuildError(f"{where}: {kind}.{name} {value!r} is not a quantity ({exc})") from exc
    return resources


def _trainer_container(info: TrainJobInfo) -> tuple[PodSet, Obj] | None:
    trainer = info.trainer()
    container = trainer.container(NODE) if trainer else None
    if trainer is None or container is None:
        return None
    return trainer, container


def _add_port(container: Obj) -> None:
    ports: list[Any] = container.setdefault("ports", [])
    if not any(p.get("containerPort") == PORT for p in ports):
        ports.append({"containerPort": PORT})


def _torch(info: TrainJobInfo) -> None:
    found = _trainer_container(info)
    if found is None:
        return
    trainer, container = found
    requested = (info.spec.get("trainer") or {}).get("numProcPerNode")
    procs: str = "auto" if requested is None else str(requested)
    resources = _node_resources(info, trainer)
    if procs == "auto" and gpus_per_node(resources) == 0:
        procs = str(max(1, cpus_per_node(resources)))
    master = info.endpoint(trainer.name)
    upsert_env(
        container,
        [
            {"name": "PET_NNODES", "value": str(trainer.count)},
            {"name": "PET_NPROC_PER_NODE", "value": procs},
            completion_index_env("PET_NODE_RANK"),
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_PORT", "value": str(PORT)},
        ],
    )
    _add_port(container)


def _jax(info: TrainJobInfo) -> None:
    found = _trainer_container(info)
    if found is None:
        return
    trainer, container = found
    upsert_env(
        container,
        [
            {"name": "JAX_NUM_PROCESSES", "value": str(trainer.count)},
            completion_index_env("JAX_PROCESS_ID"),
            {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{info.endpoint(trainer.name)}:{PORT}"},
        ],
    )
    _add_port(container)


def _xgboost(info: TrainJobInfo) -> None:
    found = _trainer_container(info)
    if found is None:
        return
    trainer, container = found
    workers = gpus_per_node(_node_resources(info, trainer)) or 1
    upsert_env(
        container,
        [
            {"name": "DMLC_TRACKER_URI", "value": info.endpoint(trainer.name)},
            {"name": "DMLC_TRACKER_PORT", "value": str(PORT)},
            completion_index_env("DMLC_TASK_ID"),
            {"name": "DMLC_NUM_WORKER", "value": str(trainer.count * workers)},
        ],
    )
    _add_port(container)


def _mpi(info: TrainJobInfo) -> None:
    policy = info.ml_policy.get("mpi") or {}
    launcher = info.trainer()
    nodes = info.pod_set(NODE)
    if launcher is None:
        return
    num_nodes = int((info.spec.get("trainer") or {}).get("numNodes") or info.ml_policy.get("numNodes") or 1)
    as_node = bool(policy.get("runLauncherAsNode"))
    launcher.count = 1
    if nodes is not None and nodes is not launcher:
        nodes.count = max(1, num_nodes - 1) if as_node else num_nodes
    requested = (info.spec.get("trainer") or {}).get("numProcPerNode")
    runtime_slots = int(policy.get("numProcPerNode") or 1)
    gpus = gpus_per_node(_node_resources(info, launcher))
    slots = int(requested) if requested else (gpus if runtime_slots == 1 and gpus > 1 else runtime_slots)
    hosts = []
    if as_node or nodes is None or nodes is launcher:
        hosts.append(info.endpoint(launcher.name))
    if nodes is not None and nodes is not launcher:
        hosts += [info.endpoint(nodes.name, 0, i) for i in range(nodes.count)]
    secret_name, hostfile_name = f"{info.name}-mpi-ssh-auth", f"{info.name}-mpi-hostfile"
    hostfile = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": hostfile_name, "ownerReferences": [info.owner_reference()]},
        "data": {"hostfile": "".join(f"{h} slots={slots}\n" for h in hosts)},
    }
    info.extras.append(Extra(SECRETS, secret_name, lambda: _ssh_secret(info, secret_name)))
    info.extras.append(Extra(CONFIGMAPS, hostfile_name, lambda: hostfile))
    ssh_path = str(policy.get("sshAuthMountPath") or "/root/.ssh")
    ssh_volume = {
        "name": "mpi-ssh-auth",
        "secret": {
            "secretName": secret_name,
            "defaultMode": 0o400,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
            ],
        },
    }
    for pod_set in {id(s): s for s in (launcher, nodes) if s is not None}.values():
        spec = pod_set.template.setdefault("spec", {})
        spec.setdefault("volumes", []).append(dict(ssh_volume))
        container = pod_set.container(NODE)
        if container is not None:
            container.setdefault("volumeMounts", []).append({"name": "mpi-ssh-auth", "mountPath": ssh_path})
    launcher_spec = launcher.template.setdefault("spec", {})
    launcher_spec["volumes"].append(
        {
            "name": "mpi-hostfile",
            "configMap": {
                "name": hostfile_name,
                "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
            },
        }
    )
    container = launcher.container(NODE)
    if container is not None:
        container.setdefault("volumeMounts", []).append(
            {"name": "mpi-hostfile", "mountPath": MPI_HOSTFILE_DIR}
        )
        upsert_env(
            container,
            [
                {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{MPI_HOSTFILE_DIR}/hostfile"},
                {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
            ],
        )


def _ssh_secret(info: TrainJobInfo, name: str) -> Obj:
    """An immutable ssh-auth Secret with a fresh ECDSA P-521 key pair (created once, never updated)."""
    import base64

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
