"""XGBoostJob: a Master (the Rabit tracker) and Workers, wired with MASTER_ADDR and WORKER_ADDRS."""

from __future__ import annotations

from kubetrain.api.kinds import XGBOOSTJOB
from kubetrain.api.objects import EnvVar
from kubetrain.controller.v1.frameworks.base import Framework, JobInfo, env_value


class XGBoost(Framework):
    api = XGBOOSTJOB

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        port = self.required_port(info, "Master")
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
