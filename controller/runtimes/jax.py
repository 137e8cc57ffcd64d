"""JAXJob: Workers wired with COORDINATOR_ADDRESS, NUM_PROCESSES and PROCESS_ID."""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.controller.runtimes.framework import (
    EnvVar,
    JobInfo,
    Obj,
    PodsByReplica,
    ReplicaCounts,
    all_succeeded,
    any_active,
    env_value,
)
from kubetrain.kube.resources import JAXJOBS, Resource


@dataclass
class Jax:
    kind: str = "JAXJob"
    resource: Resource = JAXJOBS
    framework_label: str = "jax"
    controller_name: str = "jaxjob-controller"
    replica_field: str = "jaxReplicaSpecs"
    replica_types: tuple[str, ...] = ("Worker",)
    default_container: str = "jax"
    port_name: str = "jaxjob-port"
    default_port: int = 6666
    default_restart_policy: str = "Never"

    def apply_defaults(self, info: JobInfo) -> None:
        return None

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        port = info.port("Worker")
        if port is None:
            raise ValueError(f"the Worker's jax container has no port named {self.port_name}")
        return [
            env_value("PYTHONUNBUFFERED", "1"),
            env_value("COORDINATOR_PORT", port),
            env_value("COORDINATOR_ADDRESS", f"{info.name}-worker-0"),
            env_value("NUM_PROCESSES", info.total_replicas),
            env_value("PROCESS_ID", index),
        ]

    def env_containers(self, info: JobInfo, pod: Obj) -> list[Obj]:
        containers: list[Obj] = pod["spec"].get("containers") or []
        return containers

    def is_master_role(self, info: JobInfo, rtype: str, index: int) -> bool:
        return index == 0

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        return all_succeeded(info, counts, "Worker")

    def running(self, info: JobInfo, counts: dict[str, ReplicaCounts]) -> bool:
        return any_active(counts, "Worker")
