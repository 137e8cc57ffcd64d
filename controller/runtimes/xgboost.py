"""XGBoostJob: a Master (the Rabit tracker) and Workers, wired with MASTER_ADDR and WORKER_ADDRS."""

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
from kubetrain.kube.resources import XGBOOSTJOBS, Resource


@dataclass
class XGBoost:
    kind: str = "XGBoostJob"
    resource: Resource = XGBOOSTJOBS
    framework_label: str = "xgboost"
    controller_name: str = "xgboostjob-controller"
    replica_field: str = "xgbReplicaSpecs"
    replica_types: tuple[str, ...] = ("Master", "Worker")
    default_container: str = "xgboost"
    port_name: str = "xgboostjob-port"
    default_port: int = 9999
    default_restart_policy: str = "Never"

    def apply_defaults(self, info: JobInfo) -> None:
        return None

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        port = info.port("Master")
        if port is None:
            raise ValueError(f"the Master's xgboost container has no port named {self.port_name}")
        masters = info.replicas["Master"].replicas if "Master" in info.replicas else 0
        total = info.total_replicas
        env = [
            env_value("MASTER_PORT", port),
            env_value("MASTER_ADDR", f"{info.name}-master-0"),
            env_value("WORLD_SIZE", total),
            env_value("RANK", index if rtype == "Master" else index + masters),
            env_value("PYTHONUNBUFFERED", "1"),
        ]
        if total > 1:
            env.append(
                env_value("WORKER_PORT", info.port("Worker", default=self.default_port) or self.default_port)
            )
            env.append(
                env_value("WORKER_ADDRS", ",".join(f"{info.name}-worker-{i}" for i in range(total - 1)))
            )
        return env

    def env_containers(self, info: JobInfo, pod: Obj) -> list[Obj]:
        containers: list[Obj] = pod["spec"].get("containers") or []
        return containers

    def is_master_role(self, info: JobInfo, rtype: str, index: int) -> bool:
        return rtype == "Master"

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        return all_succeeded(info, counts, "Master")

    def running(self, info: JobInfo, counts: dict[str, ReplicaCounts]) -> bool:
        return any_active(counts, "Master")
