"""TFJob: TF_CONFIG for distributed TensorFlow (Chief, Master, PS, Worker, Evaluator).

With ``enableDynamicWorker`` (upstream's semantics) each pod's TF_CONFIG is the sparse form (a Worker
sees itself and the PS), and a Worker that fails for good does not fail the job.
"""

from __future__ import annotations

import json
import os

from kubetrain.api.kinds import TFJOB
from kubetrain.api.objects import EnvVar, Obj
from kubetrain.controller.v1.frameworks.base import (
    Framework,
    JobInfo,
    PodsByReplica,
    ReplicaCounts,
    env_value,
)

CLUSTER_DOMAIN_ENV = "CUSTOM_CLUSTER_DOMAIN"


class TensorFlow(Framework):
    api = TFJOB

    def apply_defaults(self, info: JobInfo) -> None:
        info.spec.setdefault("successPolicy", "")

    def _address(self, info: JobInfo, rtype: str, index: int) -> str:
        domain = os.environ.get(CLUSTER_DOMAIN_ENV, "")
        suffix = f".{domain}" if domain else ""
        port = info.port(rtype, default=self.api.default_port)
        return f"{info.name}-{rtype.lower()}-{index}.{info.namespace}.svc{suffix}:{port}"

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        if info.total_replicas == 1:
            return []
        task = {"type": rtype.lower(), "index": index}
        if info.spec.get("enableDynamicWorker"):
            ps = (
                [self._address(info, "PS", i) for i in range(info.replicas["PS"].replicas)]
                if "PS" in info.replicas
                else []
            )
            cluster: Obj = {"worker": {}, "ps": []}
            if rtype == "PS":
                cluster["ps"] = [self._address(info, rtype, index)]
            elif rtype == "Worker":
                cluster = {"worker": {str(index): self._address(info, rtype, index)}, "ps": ps}
            config: Obj = {"cluster": cluster, "task": task}
        else:
            spec = {
                r.lower(): [self._address(info, r, i) for i in range(rep.replicas)]
                for r, rep in info.replicas.items()
            }
            config = {"cluster": dict(sorted(spec.items())), "task": task, "environment": "cloud"}
        return [env_value("TF_CONFIG", json.dumps(config, separators=(",", ":"), sort_keys=False))]

    def env_containers(self, info: JobInfo, pod: Obj) -> list[Obj]:
        for container in pod["spec"].get("containers") or []:
            if container.get("name") == self.api.default_container:
                return [container]
        return []

    def tolerates_failure(self, info: JobInfo, rtype: str) -> bool:
        """Upstream's ``enableDynamicWorker``: Workers come and go, so one that failed (restartPolicy Never)
        leaves the job running; a Worker's non-retryable ``ExitCode`` failure still fails it."""
        replica = info.replicas.get(rtype)
        return (
            bool(info.spec.get("enableDynamicWorker"))
            and rtype == "Worker"
            and replica is not None
            and replica.restart_policy == "Never"
        )

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        """Upstream's rule: the Chief (or Master) decides; without one, every Worker, or Worker 0 alone
        unless ``successPolicy`` is ``AllWorkers``."""
        done = super().succeeded(info, counts, pods)
        if done or self.leader(info) != "Worker":
            return done
        worker0 = pods.get(("Worker", 0))
        worker0_done = worker0 is not None and worker0.get("status", {}).get("phase") == "Succeeded"
        return worker0_done and info.spec.get("successPolicy") != "AllWorkers"
