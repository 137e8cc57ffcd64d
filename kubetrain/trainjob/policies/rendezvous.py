"""The ML policies whose ranks meet at the trainer's first pod: torch, jax and xgboost.

Each gives the trainer's ``node`` container the env its framework reads to find
rank 0 and its own rank (the pod's completion index), and opens port 29500;
what differs is one method, ``env``. The names and values are upstream's.
"""

from __future__ import annotations

from kubetrain.api.objects import EnvVar, Obj
from kubetrain.kube.strategic import upsert_env
from kubetrain.trainjob.policies import torchtune
from kubetrain.trainjob.policies.common import (
    PORT,
    add_port,
    completion_index_env,
    cpus_per_node,
    gpus_per_node,
    node_resources,
    trainer_container,
)
from kubetrain.trainjob.state import BuildError, PodSet, TrainJobInfo


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
    """torchrun's: ``numProcPerNode`` processes on each node (``auto`` without GPUs: one per CPU).

    A TrainJob whose trainer command is ``tune run`` (the SDK's torchtune ``BuiltinTrainer``) gets its
    command completed instead of the rendezvous address (``policies.torchtune``). The runtime's
    ``envInjection`` targets, extra containers of any replicated job, get every ``PET_*`` variable."""

    name = "torch"

    def apply(self, info: TrainJobInfo) -> None:
        found = trainer_container(info)
        if found is None:
            return
        trainer, container = found
        procs, gpus = _processes(info, trainer)
        upsert_env(container, _rank_env(info, trainer, procs))
        if torchtune.requested(info):
            container["command"] = torchtune.command(info, trainer, procs, gpus)
        else:
            upsert_env(container, _master_env(info, trainer))
        add_port(container)
        for target in _injection_targets(info):
            upsert_env(target, [*_rank_env(info, trainer, procs), *_master_env(info, trainer)])

    def env(self, info: TrainJobInfo, trainer: PodSet) -> list[EnvVar]:
        return [*_rank_env(info, trainer, _processes(info, trainer)[0]), *_master_env(info, trainer)]


def _processes(info: TrainJobInfo, trainer: PodSet) -> tuple[int | None, int]:
    """Processes per node (None: ``auto``, torchrun counts the GPUs) and a node's GPUs."""
    requested = (info.spec.get("trainer") or {}).get("numProcPerNode")
    resources = node_resources(info, trainer)
    gpus = gpus_per_node(resources)
    if requested is not None:
        return int(requested), gpus
    return (None if gpus else max(1, cpus_per_node(resources))), gpus


def _rank_env(info: TrainJobInfo, trainer: PodSet, procs: int | None) -> list[EnvVar]:
    return [
        {"name": "PET_NNODES", "value": str(trainer.count)},
        {"name": "PET_NPROC_PER_NODE", "value": "auto" if procs is None else str(procs)},
        completion_index_env("PET_NODE_RANK"),
    ]


def _master_env(info: TrainJobInfo, trainer: PodSet) -> list[EnvVar]:
    return [
        {"name": "PET_MASTER_ADDR", "value": info.endpoint(trainer.name)},
        {"name": "PET_MASTER_PORT", "value": str(PORT)},
    ]


def _injection_targets(info: TrainJobInfo) -> list[Obj]:
    """The containers ``mlPolicy.torch.envInjection`` names (containers or init containers)."""
    found: list[Obj] = []
    targets = ((info.ml_policy.get("torch") or {}).get("envInjection") or {}).get("targets") or []
    for i, target in enumerate(targets):
        where = f"spec.mlPolicy.torch.envInjection.targets[{i}]"
        pod_set = info.pod_set(str(target.get("jobName")))
        if pod_set is None:
            raise BuildError(
                f"{where}.jobName {target.get('jobName')!r} is not a replicated job of the runtime "
                f"(it has {', '.join(s.name for s in info.pod_sets)})"
            )
        spec = pod_set.template.get("spec") or {}
        containers = {
            c.get("name"): c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        }
        for j, name in enumerate(target.get("containerNames") or []):
            if name not in containers:
                raise BuildError(
                    f"{where}.containerNames[{j}] {name!r} is not a container or init container of replicated "
                    f"job {pod_set.name} (it has {', '.join(map(str, containers))})"
                )
            found.append(containers[name])
    return found


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
