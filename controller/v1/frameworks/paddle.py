"""PaddleJob: collective (Workers only) or parameter-server (Master + Workers) mode via PADDLE_* env."""

from __future__ import annotations

from kubetrain.api.kinds import PADDLEJOB
from kubetrain.api.objects import EnvVar
from kubetrain.controller.v1.frameworks.base import Framework, JobInfo, env_value


class Paddle(Framework):
    api = PADDLEJOB

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
