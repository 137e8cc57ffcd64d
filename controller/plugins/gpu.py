"""GPU hygiene: tolerate the GPU taint where GPUs are asked for, and flag lopsided jobs.

Managed GPU node pools taint their nodes ``nvidia.com/gpu:NoSchedule``; a pod
that requests GPUs but lacks the toleration stays Pending forever. The
controller adds the standard toleration to every pod that requests
``nvidia.com/gpu``. A job where one replica type asks for GPUs and another does
not is usually a mistake (a CPU-only Master holding rank 0 of an NCCL job), so
it is reported as a warning on the job.
"""

from __future__ import annotations

from kubetrain import naming, quantity
from kubetrain.api.objects import Obj
from kubetrain.controller.state import JobView
from kubetrain.controller.v1.frameworks.base import JobInfo


def gpus_requested(template: Obj) -> int:
    """GPUs one pod of this template asks for (the larger of requests and limits, per container)."""
    total = 0
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        values = [resources.get(kind, {}).get(naming.GPU_RESOURCE) for kind in ("limits", "requests")]
        total += max((quantity.ceil(v) for v in values if v is not None), default=0)
    return total


def lopsided_gpu_warning(info: JobInfo) -> str | None:
    """A warning when some replica types request GPUs and others do not."""
    per_type = {rtype: gpus_requested(r.template) for rtype, r in info.replicas.items()}
    with_gpus = sorted(t for t, n in per_type.items() if n > 0)
    without = sorted(t for t, n in per_type.items() if n == 0)
    if not with_gpus or not without:
        return None
    return (
        f"{', '.join(without)} request no GPUs while {', '.join(with_gpus)} request "
        f"{', '.join(str(per_type[t]) for t in with_gpus)} per pod; if every rank trains on GPUs, give each "
        f"replica type an {naming.GPU_RESOURCE} limit"
    )


class GpuPlugin:
    name = "gpu"

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        if gpus_requested(pod) == 0:
            return
        tolerations = pod["spec"].setdefault("tolerations", [])
        if not any(
            t.get("key") == naming.GPU_RESOURCE and t.get("effect") in (None, "", "NoSchedule")
            for t in tolerations
        ):
            tolerations.append(dict(naming.GPU_TOLERATION))
