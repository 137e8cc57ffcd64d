"""JAXJob: Workers wired with COORDINATOR_ADDRESS, NUM_PROCESSES and PROCESS_ID."""

from __future__ import annotations

from kubetrain.api.kinds import JAXJOB
from kubetrain.api.objects import EnvVar
from kubetrain.controller.v1.frameworks.base import Framework, JobInfo, env_value


class Jax(Framework):
    api = JAXJOB

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        port = self.required_port(info, "Worker")
        return [
            env_value("PYTHONUNBUFFERED", "1"),
            env_value("COORDINATOR_PORT", port),
            env_value("COORDINATOR_ADDRESS", f"{info.name}-worker-0"),
            env_value("NUM_PROCESSES", info.total_replicas),
            env_value("PROCESS_ID", index),
        ]
