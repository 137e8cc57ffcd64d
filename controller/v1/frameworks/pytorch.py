"""PyTorchJob: Master + Workers wired with MASTER_ADDR/RANK/WORLD_SIZE and torchrun's PET_* env.

Env and defaults follow upstream v1.9 exactly (names, order, values), including
the elastic rendezvous settings, so training scripts written for the upstream
operator see the same environment.
"""

from __future__ import annotations

from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.api.objects import EnvVar, Obj
from kubetrain.controller.v1.frameworks.base import (
    Framework,
    JobInfo,
    PodsByReplica,
    ReplicaCounts,
    env_value,
)


class PyTorch(Framework):
    api = PYTORCHJOB

    def apply_defaults(self, info: JobInfo) -> None:
        elastic = info.spec.get("elasticPolicy")
        if elastic is not None:
            elastic = dict(elastic)
            low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
            if low is None and high is None:
                workers = info.replicas.get("Worker")
                low = high = workers.replicas if workers else 1
            elastic["minReplicas"] = low if low is not None else high
            elastic["maxReplicas"] = high if high is not None else low
            info.spec["elasticPolicy"] = elastic
        if info.spec.get("nprocPerNode") is None and (elastic is None or elastic.get("nProcPerNode") is None):
            info.spec["nprocPerNode"] = "auto"

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        env = [env_value("PYTHONUNBUFFERED", "1")]
        nproc = info.spec.get("nprocPerNode")
        total = info.total_replicas
        if "Master" in info.replicas:
            port = self.required_port(info, "Master")
            rank = index if rtype == "Master" else index + info.replicas["Master"].replicas
            nproc_int = int(nproc) if isinstance(nproc, str) and nproc.isdigit() else 1
            master = f"{info.name}-master-0"
            env += [
                env_value("MASTER_PORT", port),
                env_value("PET_MASTER_PORT", port),
                env_value("MASTER_ADDR", master),
                env_value("PET_MASTER_ADDR", master),
                env_value("WORLD_SIZE", total * nproc_int),
                env_value("RANK", rank),
                env_value("PET_NODE_RANK", rank),
            ]
        if nproc is not None:
            env.append(env_value("PET_NPROC_PER_NODE", nproc))
        elastic = info.spec.get("elasticPolicy")
        if elastic is None:
            env.append(env_value("PET_NNODES", total))
        else:
            env += self._elastic_env(info, elastic)
        return env

    def _elastic_env(self, info: JobInfo, elastic: Obj) -> list[EnvVar]:
        host = elastic.get("rdzvHost") or f"{info.name}-worker-0"
        port = elastic.get("rdzvPort") or info.port("Worker") or self.api.default_port
        env = [
            env_value("PET_RDZV_ENDPOINT", f"{host}:{port}"),
            env_value("PET_RDZV_BACKEND", elastic.get("rdzvBackend") or "c10d"),
            env_value("PET_NNODES", f"{elastic['minReplicas']}:{elastic['maxReplicas']}"),
        ]
        if elastic.get("maxRestarts") is not None:
            env.append(env_value("PET_MAX_RESTARTS", elastic["maxRestarts"]))
        if elastic.get("nProcPerNode") is not None:
            env.append(env_value("PET_NPROC_PER_NODE", elastic["nProcPerNode"]))
        if elastic.get("rdzvId"):
            env.append(env_value("PET_RDZV_ID", elastic["rdzvId"]))
        if elastic.get("rdzvConf") is not None:
            conf = ",".join(f"{c.get('key', '')}={c.get('value', '')}" for c in elastic["rdzvConf"])
            env.append(env_value("PET_RDZV_CONF", conf))
        if elastic.get("standalone"):
            env.append(env_value("PET_STANDALONE", ""))
        return env

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        """Upstream's rule; and without a Master an elastic job succeeds once any Worker has."""
        if super().succeeded(info, counts, pods):
            return True
        elastic = info.spec.get("elasticPolicy") is not None
        return (
            elastic and self.leader(info) == "Worker" and counts.get("Worker", ReplicaCounts()).succeeded > 0
        )

    def autoscaler(self, info: JobInfo) -> Obj | None:
        """An elastic job with metrics gets upstream's HorizontalPodAutoscaler, named after the job."""
        elastic = info.spec.get("elasticPolicy") or {}
        if not elastic.get("metrics"):
            return None
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {
                "name": info.name,
                "namespace": info.namespace,
                "ownerReferences": [info.owner_reference()],
            },
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": info.job["apiVersion"],
                    "kind": info.job["kind"],
                    "name": info.name,
                },
                "minReplicas": elastic["minReplicas"],
                "maxReplicas": elastic["maxReplicas"],
                "metrics": elastic["metrics"],
            },
        }
