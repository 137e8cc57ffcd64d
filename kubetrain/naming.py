"""Names, labels, annotations and env vars: every string contract in one place.

Upstream-compatible keys (``training.kubeflow.org/*``, ``jobset.sigs.k8s.io/*``)
are facts other tools rely on; ``kubetrain.dev/*`` keys are our own contracts
(docs/reference/annotations.md lists them for users).
"""

from __future__ import annotations

import hashlib
import re
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


# Pod and service names are "<job>-<type>-<index>" and must stay DNS labels (63 characters), so job
# names kubetrain derives are kept to this length, with a short hash when they are cut.
MAX_DERIVED_JOB_NAME = 45


def dns_label(text: str, *, limit: int = MAX_DERIVED_JOB_NAME) -> str:
    """``text`` as a DNS-1035 label of at most ``limit`` characters; a cut name ends in a hash of the whole."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"job-{cleaned}".rstrip("-")
    if len(cleaned) <= limit:
        return cleaned
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{cleaned[: limit - 9].rstrip('-')}-{digest}"


def attempt_name(lineage: str, attempt: int) -> str:
    """Name of the ``attempt``-th job of a lineage: ``<lineage>-a<attempt>``."""
    suffix = f"-a{attempt}"
    return dns_label(lineage, limit=MAX_DERIVED_JOB_NAME - len(suffix)) + suffix


def label_value(text: str) -> str:
    """``text`` made a valid label value (63 characters of alphanumerics, '-', '_', '.')."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-")
    if len(cleaned) <= 63:
        return cleaned
    return f"{cleaned[:54].rstrip('_.-')}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
