"""The ML policies whose ranks meet at the trainer's first pod: torch, jax and xgboost.

Each gives the trainer's ``node`` container the env its framework reads to find
rank 0 and its own rank (the pod's completion index), and opens port 29500;
what differs is one method, ``env``. The names and values are upstream's.
"""

from __future__ import annotations

from kubetrain.controller.state import EnvVar
from kubetrain.controller.trainer.policies.common import (
    PORT,
    add_port,
    completion_index_env,
    cpus_per_node,
    gpus_per_node,
    node_resources,
    trainer_container,
)
from kubetrain.controller.trainer.state import PodSet, TrainJobInfo
from kubetrain.kube.strategic import upsert_env


class Rendezvous:
    """A policy that points every rank of the trainer at rank 0."""

    name: str

    def apply(self, info: TrainJobInfo) -> None:
        found = trainer_container(info)
        if found is None:
            return
        trainer, container = found
        upsert_env(container, self.env(info, trainer))
        add_port(container)

    def env(self, info: TrainJobInfo, trainer: PodSet) -> list[EnvVar]:
        raise NotImplementedError


class Torch(Rendezvous):
    """torchrun's: ``numProcPerNode`` processes on each node (``auto`` without GPUs: one per CPU)."""

    name = "torch"

    def env(self, info: TrainJobInfo, trainer: PodSet) -> list[EnvVar]:
        requested = (info.spec.get("trainer") or {}).get("numProcPerNode")
        procs: str = "auto" if requested is None else str(requested)
        resources = node_resources(info, trainer)
        if procs == "auto" and gpus_per_node(resources) == 0:
            procs = str(max(1, cpus_per_node(resources)))
        return [
            {"name": "PET_NNODES", "value": str(trainer.count)},
            {"name": "PET_NPROC_PER_NODE", "value": procs},
            completion_index_env("PET_NODE_RANK"),
            {"name": "PET_MASTER_ADDR", "value": info.endpoint(trainer.name)},
            {"name": "PET_MASTER_PORT", "value": str(PORT)},
        ]


class Jax(Rendezvous):
    """``jax.distributed``'s: one process per pod."""

    name = "jax"

    def env(self, info: TrainJobInfo, trainer: PodSet) -> list[EnvVar]:
        return [
            {"name": "JAX_NUM_PROCESSES", "value": str(trainer.count)},
            completion_index_env("JAX_PROCESS_ID"),
            {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{info.endpoint(trainer.name)}:{PORT}"},
        ]


class XGBoost(Rendezvous):
    """The Rabit tracker's ``DMLC_*`` settings: one worker per GPU of a node (one without GPUs)."""

    name = "xgboost"

    def env(self, info: TrainJobInfo, trainer: PodSet) -> list[EnvVar]:
        workers = gpus_per_node(node_resources(info, trainer)) or 1
        return [
            {"name": "DMLC_TRACKER_URI", "value": info.endpoint(trainer.name)},
            {"name": "DMLC_TRACKER_PORT", "value": str(PORT)},
            completion_index_env("DMLC_TASK_ID"),
            {"name": "DMLC_NUM_WORKER", "value": str(trainer.count * workers)},
        ]
