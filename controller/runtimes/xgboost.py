"""XGBoostJob: a Master (the Rabit tracker) and Workers, wired with MASTER_ADDR and WORKER_ADDRS."""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.api.kinds import XGBOOSTJOB, V1Kind
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
class XGBoost:
    api: V1Kind = XGBOOSTJOB

    def apply_defaults(self, info: JobInfo) -> None:
        return None

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        port = info.port("Master")
        if port is None:
            raise ValueError(f"the Master's xgboost container has no port named {self.api.port_name}")
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
                env_value(
                    "WORKER_PORT", info.port("Worker", default=self.api.default_port) or self.api.default_port
                )
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
