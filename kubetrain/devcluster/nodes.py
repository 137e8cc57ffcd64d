"""Simulated nodes that kwok keeps alive: GPU nodes and plain CPU nodes.

GPU nodes carry the ``nvidia.com/gpu=present:NoSchedule`` taint that managed
GPU node pools (GKE, AKS, the NVIDIA GPU operator) put on them, so only pods
that ask for GPUs and tolerate the taint land there; that is the situation the
controller's GPU hygiene has to handle in production.

Every simulated node is labelled ``kubetrain.dev/simulated=true``. On a cluster
whose process node is the default node (``kubetrain dev up
--process-node-default``) they are tainted with that key too, so a pod that asks
for nothing runs for real on the process node, and only a pod that tolerates the
taint is simulated: the upstream SDKs' pods name no node, and would otherwise
"succeed" on a kwok node without running.
"""

from __future__ import annotations

from typing import Any

from kubetrain import naming

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = naming.GPU_RESOURCE
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
SIMULATED_TAINT = {"key": naming.LABEL_SIMULATED_NODE, "value": "true", "effect": "NoSchedule"}


def _node(
    name: str, *, labels: dict[str, str], capacity: dict[str, str], taints: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                naming.LABEL_SIMULATED_NODE: "true",
                **labels,
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def gpu_node(index: int, *, gpus: int, tainted: bool = False) -> dict[str, Any]:
    """A fake GPU node advertising ``gpus`` devices of one product (``tainted``: also the simulated
    taint)."""
    return _node(
        f"kwok-gpu-{index}",
        labels={
            "node.kubernetes.io/instance-type": "kwok-gpu",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": GPU_PRODUCT,
            "nvidia.com/gpu.count": str(gpus),
        },
        capacity={
            "cpu": "96",
            "memory": "1024Gi",
            "pods": "110",
            "ephemeral-storage": "2Ti",
            GPU_RESOURCE: str(gpus),
        },
        taints=[GPU_TAINT, *([SIMULATED_TAINT] if tainted else [])],
    )


def cpu_node(index: int, *, tainted: bool = False) -> dict[str, Any]:
    """A fake CPU-only node, where replicas without GPUs (and system pods) land, unless ``tainted``
    with the simulated taint."""
    return _node(
        f"kwok-cpu-{index}",
        labels={"node.kubernetes.io/instance-type": "kwok-cpu"},
        capacity={"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
        taints=[SIMULATED_TAINT] if tainted else [],
    )


def fake_nodes(
    *, gpu_nodes: int, gpus_per_node: int, cpu_nodes: int, tainted: bool = False
) -> list[dict[str, Any]]:
    """Every simulated node of a cluster (``tainted``: when the process node is the default node)."""
    return [gpu_node(i, gpus=gpus_per_node, tainted=tainted) for i in range(gpu_nodes)] + [
        cpu_node(i, tainted=tainted) for i in range(cpu_nodes)
    ]
