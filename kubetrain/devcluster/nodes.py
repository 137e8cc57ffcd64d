"""Simulated nodes that kwok keeps alive: GPU nodes and plain CPU nodes.

GPU nodes carry the ``nvidia.com/gpu=present:NoSchedule`` taint that managed
GPU node pools (GKE, AKS, the NVIDIA GPU operator) put on them, so only pods
that ask for GPUs and tolerate the taint land there; that is the situation the
controller's GPU hygiene has to handle in production.
"""

from __future__ import annotations

from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


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
                **labels,
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def gpu_node(index: int, *, gpus: int) -> dict[str, Any]:
    """A fake GPU node advertising ``gpus`` devices of one product."""
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
        taints=[GPU_TAINT],
    )


def cpu_node(index: int) -> dict[str, Any]:
    """A fake CPU-only node, where replicas without GPUs (and system pods) land."""
    return _node(
        f"kwok-cpu-{index}",
        labels={"node.kubernetes.io/instance-type": "kwok-cpu"},
        capacity={"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
        taints=[],
    )


def fake_nodes(*, gpu_nodes: int, gpus_per_node: int, cpu_nodes: int) -> list[dict[str, Any]]:
    """Every simulated node of a cluster."""
    return [gpu_node(i, gpus=gpus_per_node) for i in range(gpu_nodes)] + [
        cpu_node(i) for i in range(cpu_nodes)
    ]
