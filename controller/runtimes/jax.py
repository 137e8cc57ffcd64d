"""JAXJob: Workers wired with COORDINATOR_ADDRESS, NUM_PROCESSES and PROCESS_ID."""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.api.kinds import JAXJOB, V1Kind
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


@dataclass
class Jax:
    api: V1Kind = JAXJOB

    def apply_defaults(self, info: JobInfo) -> None:
        return None

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        port = info.port("Worker")
        if port is None:
            raise ValueError(f"the Worker's jax container has no port named {self.api.port_name}")
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
