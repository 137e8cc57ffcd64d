"""Names, labels, annotations and env vars: every string contract in one place.

Upstream-compatible keys (``training.kubeflow.org/*``, ``jobset.sigs.k8s.io/*``)
are facts other tools rely on; ``kubetrain.dev/*`` keys are our own contracts
(docs/reference/annotations.md lists them for users).
"""

from __future__ import annotations

from typing import Final

# -- Kubeflow v1 pod and service labels --------------------------------------------------------
LABEL_OPERATOR_NAME: Final = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE: Final = "training.kubeflow.org/job-role"

# -- kubetrain contracts --------------------------------------------------------------------------
PREFIX: Final = "kubetrain.dev"
ANNOTATION_CHECKPOINT_DIR: Final = "kubetrain.dev/checkpoint-dir"
ANNOTATION_CHECKPOINT_VOLUME: Final = "kubetrain.dev/checkpoint-volume"
ANNOTATION_LAST_CHECKPOINT: Final = "kubetrain.dev/last-checkpoint"
ANNOTATION_TRAINING_REPORT: Final = "kubetrain.dev/training-report"
ANNOTATION_ATTEMPT: Final = "kubetrain.dev/attempt"
ANNOTATION_TTL_AFTER_FINISHED: Final = "kubetrain.dev/ttl-seconds-after-finished"
LABEL_LINEAGE: Final = "kubetrain.dev/lineage"

ENV_CHECKPOINT_DIR: Final = "KUBETRAIN_CHECKPOINT_DIR"
ENV_RESUME_FROM: Final = "KUBETRAIN_RESUME_FROM"
ENV_ATTEMPT: Final = "KUBETRAIN_ATTEMPT"

CHECKPOINT_VOLUME_NAME: Final = "kubetrain-checkpoints"

# -- GPUs -----------------------------------------------------------------------------------------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_TOLERATION: Final = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# -- the controller -------------------------------------------------------------------------------
FIELD_MANAGER: Final = "kubetrain-controller"
MANAGED_BY_KUBETRAIN: Final = "kubetrain.dev/controller"


def replica_name(job: str, replica_type: str, index: int) -> str:
    """Pod and service name of one replica: ``<job>-<type>-<index>`` (upstream's form)."""
    return f"{job}-{replica_type.lower()}-{index}".replace("/", "-")
