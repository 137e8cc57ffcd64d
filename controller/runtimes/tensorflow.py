"""TFJob: TF_CONFIG for distributed TensorFlow (Chief, Master, PS, Worker, Evaluator)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from kubetrain.api.kinds import TFJOB, V1Kind
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

CLUSTER_DOMAIN_ENV = "CUSTOM_CLUSTER_DOMAIN"


@dataclass
class TensorFlow:
    api: V1Kind = TFJOB

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

    def is_master_role(self, info: JobInfo, rtype: str, index: int) -> bool:
        if "Chief" in info.replicas or "Master" in info.replicas:
            return rtype in ("Chief", "Master")
        return rtype == "Worker" and index == 0

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        for chief in ("Chief", "Master"):
            if chief in info.replicas:
                return all_succeeded(info, counts, chief)
        if "Worker" not in info.replicas:
            return False
        if all_succeeded(info, counts, "Worker"):
            return True
        worker0 = pods.get(("Worker", 0))
        worker0_done = worker0 is not None and worker0.get("status", {}).get("phase") == "Succeeded"
        return worker0_done and info.spec.get("successPolicy") != "AllWorkers"

    def running(self, info: JobInfo, counts: dict[str, ReplicaCounts]) -> bool:
        for chief in ("Chief", "Master"):
            if chief in info.replicas:
                return any_active(counts, chief)
        return any_active(counts, "Worker")
