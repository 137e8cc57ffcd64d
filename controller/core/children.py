"""The pods and headless services of a v1 job, exactly as upstream names and labels them.

Pure functions: a ``JobInfo`` in, manifests out. The framework supplies the
env; pod plugins (checkpoint, GPU, gang, master-wait) decorate the result.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from kubetrain import naming
from kubetrain.api.objects import Obj
from kubetrain.controller.state import PodPlugin
from kubetrain.controller.v1.frameworks.base import JobInfo, replica_labels


def build_pod(info: JobInfo, rtype: str, index: int, plugins: Sequence[PodPlugin]) -> Obj:
    """The pod of replica ``rtype``/``index``."""
    replica = info.replicas[rtype]
    template = info.pod_template(rtype)
    metadata = template.get("metadata") or {}
    labels = {**(metadata.get("labels") or {}), **replica_labels(info, rtype, index)}
    if info.framework.is_master_role(info, rtype, index):
        labels[naming.LABEL_JOB_ROLE] = "master"
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": naming.replica_name(info.name, rtype, index),
            "namespace": info.namespace,
            "labels": labels,
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": [info.owner_reference()],
        },
        "spec": template.get("spec") or {},
    }
    if metadata.get("finalizers"):
        pod["metadata"]["finalizers"] = list(metadata["finalizers"])
    env = info.framework.env(info, rtype, index)
    for container in info.framework.env_containers(info, pod):
        container.setdefault("env", []).extend(copy.deepcopy(env))
    spec = pod["spec"]
    if spec.get("restartPolicy") and spec["restartPolicy"] != _pod_restart_policy(replica.restart_policy):
        info.warnings.append(
            f"restartPolicy of the {rtype} pod template is replaced by the replica's {replica.restart_policy}"
        )
    spec["restartPolicy"] = _pod_restart_policy(replica.restart_policy)
    for plugin in plugins:
        plugin.decorate_pod(info, rtype, index, pod)
    return pod


def _pod_restart_policy(replica_policy: str) -> str:
    """ExitCode is the controller's policy; the kubelet sees Never and the controller recreates."""
    return "Never" if replica_policy == "ExitCode" else replica_policy


def build_service(info: JobInfo, rtype: str, index: int) -> Obj:
    """The headless service that gives replica ``rtype``/``index`` a stable DNS name."""
    labels = replica_labels(info, rtype, index)
    container = info.default_container(info.pod_template(rtype)) or {}
    ports = [
        {"name": p["name"], "port": int(p["containerPort"])}
        for p in container.get("ports") or []
        if p.get("name")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": naming.replica_name(info.name, rtype, index),
            "namespace": info.namespace,
            "labels": labels,
            "ownerReferences": [info.owner_reference()],
        },
        "spec": {"clusterIP": "None", "selector": labels, "ports": ports},
    }


def replica_of(obj: Obj) -> tuple[str, int] | None:
    """``(replica type label, index)`` of a child, or None when its labels are missing or malformed."""
    labels = obj.get("metadata", {}).get("labels") or {}
    rtype = labels.get(naming.LABEL_REPLICA_TYPE)
    index = labels.get(naming.LABEL_REPLICA_INDEX)
    if rtype is None or index is None or not index.isdigit():
        return None
    return rtype, int(index)
