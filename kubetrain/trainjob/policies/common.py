"""What the ML policies share: the port they wire ranks on, the rank env, one node's resources."""

from __future__ import annotations

from typing import Any

from kubetrain import naming, quantity
from kubetrain.api.objects import Obj
from kubetrain.trainjob.state import NODE, BuildError, PodSet, TrainJobInfo

PORT = 29500


def completion_index_env(name: str) -> Obj:
    """An env var holding the pod's completion index (its rank among the pods of its Job)."""
    path = f"metadata.annotations['{naming.JOB_COMPLETION_INDEX}']"
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def gpus_per_node(resources: Obj) -> int:
    """GPUs of one node: the first resource whose name contains 'gpu', from requests, else limits."""
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            if "gpu" in name.lower():
                count = quantity.ceil(value)
                if count:
                    return count
                break
    return 0


def cpus_per_node(resources: Obj) -> int:
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get("cpu")
        if value is not None and quantity.ceil(value) > 0:
            return quantity.ceil(value)
    return 0


def node_resources(info: TrainJobInfo, trainer: PodSet) -> Obj:
    """One node's resources, checked: a value that is not a quantity names its field."""
    override = (info.spec.get("trainer") or {}).get("resourcesPerNode")
    where = (
        "spec.trainer.resourcesPerNode"
        if override
        else f"the resources of container {NODE} of the runtime's replicated job {trainer.name}"
    )
    resources = dict(override or (trainer.container(NODE) or {}).get("resources") or {})
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            try:
                quantity.ceil(value)
            except ValueError as exc:
                raise BuildError(f"{where}: {kind}.{name} {value!r} is not a quantity ({exc})") from exc
    return resources


def trainer_container(info: TrainJobInfo) -> tuple[PodSet, Obj] | None:
    """The trainer's pod set and its ``node`` container, when the runtime has both."""
    trainer = info.trainer()
    container = trainer.container(NODE) if trainer else None
    if trainer is None or container is None:
        return None
    return trainer, container


def add_port(container: Obj) -> None:
    ports: list[Any] = container.setdefault("ports", [])
    if not any(p.get("containerPort") == PORT for p in ports):
        ports.append({"containerPort": PORT})
