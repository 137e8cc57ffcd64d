"""Where a TrainJob's outputs lie, and whether deleting the TrainJob would delete them.

A runtime's ``volumeClaimPolicies`` make claims the TrainJob owns (deleted with it unless
``retentionPolicy.whenDeleted: Retain``). A job that keeps its checkpoints or its trained model on such
a claim loses them when a TTL deletes the TrainJob (or the runtime's JobSet TTL deletes what the JobSet
owns). The Airflow operator refuses such a TTL or ``on_finish_action`` before it submits; the
controller holds the deletion whichever way the TrainJob came (kubectl, the CLI, KFP). Both decide
with these functions, which read the build (``kubetrain.trainjob.build``) and do no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubetrain import naming
from kubetrain.api.objects import Obj
from kubetrain.client import kinds
from kubetrain.kube.resources import PVCS
from kubetrain.trainjob.state import TrainJobInfo


@dataclass(frozen=True)
class ClaimMount:
    """A PersistentVolumeClaim the trainer's pods mount at ``path``; ``owned``: deleted with the job."""

    path: str
    claim: str
    owned: bool


def claim_mounts(info: TrainJobInfo) -> list[ClaimMount]:
    """The claims a TrainJob's trainer pods mount, as built: a ``volumeClaimPolicies`` claim belongs to
    the TrainJob unless retained; the checkpoint volume is the user's own claim."""
    owned = {extra.name for extra in info.extras if extra.resource is PVCS and not extra.retained}
    mounts: list[ClaimMount] = []
    trainer = info.trainer()
    if trainer is not None:
        spec = trainer.template.get("spec") or {}
        claims = {
            volume.get("name"): (volume.get("persistentVolumeClaim") or {}).get("claimName")
            for volume in spec.get("volumes") or []
        }
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for mount in container.get("volumeMounts") or []:
                claim = claims.get(mount.get("name"))
                if claim and mount.get("mountPath"):
                    mounts.append(ClaimMount(str(mount["mountPath"]), str(claim), claim in owned))
    annotations = info.job["metadata"].get("annotations") or {}
    checkpoint_dir = annotations.get(naming.ANNOTATION_CHECKPOINT_DIR)
    checkpoint_volume = annotations.get(naming.ANNOTATION_CHECKPOINT_VOLUME)
    if checkpoint_dir and checkpoint_volume:
        mounts.append(ClaimMount(str(checkpoint_dir), str(checkpoint_volume), False))
    return mounts


def holding_claim(path: str, mounts: Sequence[ClaimMount]) -> ClaimMount | None:
    """The claim ``path`` lies on: the deepest mount that contains it."""

    def contains(mount: ClaimMount) -> bool:
        root = mount.path.rstrip("/")
        return path == root or path.startswith(root + "/")

    return max((m for m in mounts if contains(m)), key=lambda m: len(m.path), default=None)


def output_paths(job: Obj) -> list[str]:
    """Where a job's outputs are on its pods' file system: its reported last checkpoint, then its
    checkpoint dir (an object-store URL is outside every claim)."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    found = [
        annotations.get(naming.ANNOTATION_LAST_CHECKPOINT),
        kinds.report(job).get("last_checkpoint"),
        annotations.get(naming.ANNOTATION_CHECKPOINT_DIR),
    ]
    return list(dict.fromkeys(p for p in found if isinstance(p, str) and p.startswith("/")))


def output_deleted_with_job(paths: Sequence[str], mounts: Sequence[ClaimMount]) -> tuple[str, str] | None:
    """``(path, claim)``: the first output that lies on a claim deleting the job would delete."""
    for path in paths:
        mount = holding_claim(path, mounts)
        if mount is not None and mount.owned:
            return path, mount.claim
    return None


def outputs_at_risk(info: TrainJobInfo) -> tuple[str, str] | None:
    """``(path, claim)`` when deleting the TrainJob ``info`` was built from would delete its output."""
    return output_deleted_with_job(output_paths(info.job), claim_mounts(info))
