"""The checkpoint contract: tell every training container where checkpoints live and where to resume.

A job opts in with the ``kubetrain.dev/checkpoint-dir`` annotation (a path in
the pods, or an object-store URL such as ``s3://bucket/prefix``) and optionally
``kubetrain.dev/checkpoint-volume`` (a PVC mounted at that path; without one, an
emptyDir is mounted there; a URL mounts nothing) and ``kubetrain.dev/checkpoint-secret``
(a Secret whose keys become every container's env through ``envFrom``, e.g. the
``AWS_*`` credentials of an S3-compatible store: referenced, never copied). Every container then gets ``KUBETRAIN_CHECKPOINT_DIR``,
``KUBETRAIN_RESUME_FROM`` (the latest checkpoint the controller has seen
reported, so a recreated pod resumes from it), ``KUBETRAIN_ATTEMPT`` and, when
the job has a ``kubetrain.dev/lineage`` label, ``KUBETRAIN_LINEAGE``: the
checkpoint directory's fence compares an attempt only with attempts of its own
lineage, so a pipeline step that continues another job's checkpoints in the
same directory is not taken for a stale attempt of that job.
"""

from __future__ import annotations

from kubetrain import naming
from kubetrain.api.objects import JobIdentity, Obj
from kubetrain.controller.state import JobView
from kubetrain.controller.v1.frameworks.base import env_value
from kubetrain.locations import is_url


def job_labels(info: JobView) -> dict[str, str]:
    """The job's labels; a v1 ``JobInfo`` and a TrainJob's build state both hold the job itself."""
    if not isinstance(info, JobIdentity):
        return {}
    labels: dict[str, str] = info.job["metadata"].get("labels") or {}
    return labels


class CheckpointPlugin:
    name = "checkpoint"

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        directory = info.annotations.get(naming.ANNOTATION_CHECKPOINT_DIR)
        if not directory:
            return
        env = [
            env_value(naming.ENV_CHECKPOINT_DIR, directory),
            env_value(naming.ENV_RESUME_FROM, info.annotations.get(naming.ANNOTATION_LAST_CHECKPOINT, "")),
            env_value(naming.ENV_ATTEMPT, info.annotations.get(naming.ANNOTATION_ATTEMPT, "1")),
        ]
        lineage = job_labels(info).get(naming.LABEL_LINEAGE)
        if lineage:
            env.append(env_value(naming.ENV_LINEAGE, lineage))
        claim = info.annotations.get(naming.ANNOTATION_CHECKPOINT_VOLUME)
        secret = info.annotations.get(naming.ANNOTATION_CHECKPOINT_SECRET)
        spec = pod["spec"]
        containers = spec.get("containers") or []
        for container in containers:
            names = {e.get("name") for e in container.get("env") or []}
            container.setdefault("env", []).extend(e for e in env if e["name"] not in names)
            sources = container.setdefault("envFrom", []) if secret else []
            if secret and not any((s.get("secretRef") or {}).get("name") == secret for s in sources):
                sources.append({"secretRef": {"name": secret}})
        if is_url(directory):
            return  # object storage: nothing to mount
        if any(m.get("mountPath") == directory for c in containers for m in c.get("volumeMounts") or []):
            return  # the template mounts something there itself
        # The claim when there is one; else an emptyDir, so the directory is writable even with a
        # read-only root filesystem (it survives container restarts, not a recreated pod).
        source = {"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}
        volumes = spec.setdefault("volumes", [])
        if not any(v.get("name") == naming.CHECKPOINT_VOLUME_NAME for v in volumes):
            volumes.append({"name": naming.CHECKPOINT_VOLUME_NAME, **source})
        for container in containers:
            container.setdefault("volumeMounts", []).append(
                {"name": naming.CHECKPOINT_VOLUME_NAME, "mountPath": directory}
            )
