"""PaddleJob: collective (Workers only) or parameter-server (Master + Workers) mode via PADDLE_* env."""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.api.kinds import PADDLEJOB, V1Kind
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
class Paddle:
    api: V1Kind = PADDLEJOB

    def apply_defaults(self, info: JobInfo) -> None:
        return None

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        env = [
            env_value("PYTHONUNBUFFERED", "1"),
            env_value("PADDLE_JOB_ID", info.name),
            env_value("PADDLE_NNODES", info.total_replicas),
        ]
        leader = "Master" if "Master" in info.replicas else "Worker"
        port = info.port(leader, default=self.api.default_port)
        if rtype == leader and index == 0:
            env += [
                {"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                env_value("PADDLE_MASTER", f"$(POD_IP_DUMMY):{port}"),
            ]
        else:
            env.append(env_value("PADDLE_MASTER", f"{info.name}-{leader.lower()}-0:{port}"))
        if leader == "Master":
            env.append(env_value("PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM", 1))
        return env

    def env_containers(self, info: JobInfo, pod: Obj) -> list[Obj]:
        containers: list[Obj] = pod["spec"].get("containers") or []
        return containers

    def is_master_role(self, info: JobInfo, rtype: str, index: int) -> bool:
        return rtype == "Master" if "Master" in info.replicas else (rtype == "Worker" and index == 0)

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        return all_succeeded(info, counts, "Master" if "Master" in info.replicas else "Worker")

    def running(self, info: JobInfo, counts: dict[str, ReplicaCounts]) -> bool:
        return any_active(counts, "Master" if "Master" in info.replicas else "Worker")
