"""Labels, annotations, managedBy values, names and kubetrain's env vars: the string contracts in one place.

Upstream-compatible keys (``training.kubeflow.org/*``, ``trainer.kubeflow.org/*``,
``jobset.sigs.k8s.io/*``, the gang schedulers') are facts other tools rely on;
``kubetrain.dev/*`` keys are our own contracts (docs/reference/annotations.md
lists them for users). ``tests/unit/test_layers.py`` fails when another module
writes one of these keys out. Two kinds of contract live elsewhere, each in one
place too: a kind's identity in the kind registry (``kubetrain.api.kinds``), and
the env that wires a job's replicas together in its framework or ML policy
(docs/reference/env.md lists it).
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

# -- TrainJob pod labels: what JobSet and the Indexed Job controller would set --------------------
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_REPLICATED_JOB_REPLICAS: Final = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOBSET_GLOBAL_REPLICAS: Final = "jobset.sigs.k8s.io/global-replicas"
JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
JOBSET_JOB_GLOBAL_INDEX: Final = "jobset.sigs.k8s.io/job-global-index"
JOBSET_JOB_KEY: Final = "jobset.sigs.k8s.io/job-key"
JOBSET_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_GROUP_NAME: Final = "jobset.sigs.k8s.io/group-name"
JOBSET_GROUP_REPLICAS: Final = "jobset.sigs.k8s.io/group-replicas"
JOBSET_JOB_GROUP_INDEX: Final = "jobset.sigs.k8s.io/job-group-index"
JOBSET_COORDINATOR: Final = "jobset.sigs.k8s.io/coordinator"
JOB_NAME: Final = "batch.kubernetes.io/job-name"
JOB_NAME_LEGACY: Final = "job-name"
JOB_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
JOB_CONTROLLER_UID_LEGACY: Final = "controller-uid"
JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
# The Job controller's per-index failure counts, on every pod of an index (a replacement carries its
# predecessors' count, so a garbage-collected pod takes nothing back).
JOB_INDEX_FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-failure-count"
JOB_INDEX_IGNORED_FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-ignored-failure-count"
ENV_JOB_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"
TRAINJOB_RUNTIME_SNAPSHOT: Final = "kubetrain.dev/runtime-snapshot-of"

# -- Kubeflow Trainer v2 labels on runtimes and their replicated jobs ---------------------------------
LABEL_TRAINER_FRAMEWORK: Final = "trainer.kubeflow.org/framework"
LABEL_TRAINJOB_ANCESTOR: Final = "trainer.kubeflow.org/trainjob-ancestor-step"

# -- gang schedulers: how pods point at their pod group ---------------------------------------------
LABEL_COSCHEDULING_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins
ANNOTATION_VOLCANO_GROUP: Final = "scheduling.k8s.io/group-name"
ANNOTATION_VOLCANO_TASK: Final = "volcano.sh/task-spec"
ANNOTATION_VOLCANO_QUEUE: Final = "scheduling.volcano.sh/queue-name"  # on a runtime's JobSet template

# -- managedBy: which controller reconciles a job ------------------------------------------------
MANAGED_BY_TRAINING_OPERATOR: Final = "kubeflow.org/training-operator"  # upstream v1 jobs
MANAGED_BY_TRAINER: Final = "trainer.kubeflow.org/trainjob-controller"  # upstream TrainJobs
MANAGED_BY_MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"

# -- Kueue: the labels a job is queued with (Kueue reads them; kubetrain never writes them) -----------
LABEL_KUEUE_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"  # the job's LocalQueue
LABEL_KUEUE_PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass
LABEL_KUEUE_JOB_UID: Final = "kueue.x-k8s.io/job-uid"  # on the Workload Kueue makes for a job
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSIONS: Final = ("v1beta2", "v1beta1")  # newest first; Kueue before v0.15 serves v1beta1 only
KUEUE_VISIBILITY_GROUP: Final = "visibility.kueue.x-k8s.io"  # Kueue's on-demand API of pending positions


def trainjob_job_name(trainjob: str, replicated_job: str, job_index: int) -> str:
    """The name JobSet gives a child Job: ``<trainjob>-<replicated job>-<job index>``."""
    return f"{trainjob}-{replicated_job}-{job_index}"


def trainjob_hostname(trainjob: str, replicated_job: str, job_index: int, pod_index: int) -> str:
    """A TrainJob pod's stable hostname, as an Indexed Job sets it: ``<job name>-<completion index>``."""
    return f"{trainjob_job_name(trainjob, replicated_job, job_index)}-{pod_index}"


# -- kubetrain contracts --------------------------------------------------------------------------
PREFIX: Final = "kubetrain.dev"
ANNOTATION_CHECKPOINT_DIR: Final = "kubetrain.dev/checkpoint-dir"
ANNOTATION_CHECKPOINT_VOLUME: Final = "kubetrain.dev/checkpoint-volume"
ANNOTATION_CHECKPOINT_SECRET: Final = "kubetrain.dev/checkpoint-secret"  # its keys: the containers' env
ANNOTATION_FAILURE_LOG_TAIL: Final = "kubetrain.dev/failure-log-tail"  # "false": no log lines in the status
ANNOTATION_LAST_CHECKPOINT: Final = "kubetrain.dev/last-checkpoint"
ANNOTATION_TRAINING_REPORT: Final = "kubetrain.dev/training-report"
ANNOTATION_ATTEMPT: Final = "kubetrain.dev/attempt"
ANNOTATION_TTL_AFTER_FINISHED: Final = "kubetrain.dev/ttl-seconds-after-finished"
LABEL_LINEAGE: Final = "kubetrain.dev/lineage"

# -- lineages: the attempts of one training run (kubetrain.client.lineage) -------------------------
# Earlier attempts are found by a hash of the caller's full identity, never by readable labels alone:
# those are lossy (label values drop characters), so two callers could share them.
LABEL_IDENTITY_HASH: Final = "kubetrain.dev/identity-hash"
ANNOTATION_IDENTITY: Final = "kubetrain.dev/identity"  # the identity itself, compared in full
ANNOTATION_SPEC_HASH: Final = "kubetrain.dev/spec-hash"  # what the attempt was asked to run
ANNOTATION_RESULT_DELIVERED: Final = "kubetrain.dev/result-delivered"  # the task returned this result
# Readable labels of an Airflow task's job, for people and kubectl; never used to find a job.
LABEL_DAG_ID: Final = "kubetrain.dev/dag-id"
LABEL_TASK_ID: Final = "kubetrain.dev/task-id"
LABEL_RUN_ID: Final = "kubetrain.dev/run-id"
LABEL_MAP_INDEX: Final = "kubetrain.dev/map-index"
LABEL_TRY_NUMBER: Final = "kubetrain.dev/try-number"

ENV_CHECKPOINT_DIR: Final = "KUBETRAIN_CHECKPOINT_DIR"
ENV_RESUME_FROM: Final = "KUBETRAIN_RESUME_FROM"
ENV_ATTEMPT: Final = "KUBETRAIN_ATTEMPT"
ENV_LINEAGE: Final = "KUBETRAIN_LINEAGE"

CHECKPOINT_VOLUME_NAME: Final = "kubetrain-checkpoints"

# -- progress (docs/observability.md) ------------------------------------------------------------
# The Kubeflow Trainer status-server contract: the env and volume a trainer container is given.
ENV_TRAINER_SERVER_URL: Final = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_TRAINER_SERVER_CA_CERT: Final = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TRAINER_SERVER_TOKEN: Final = "KUBEFLOW_TRAINER_SERVER_TOKEN"
TRAINER_TOKEN_VOLUME: Final = "kubeflow-trainer-token"
TRAINER_TOKEN_DIR: Final = "/var/run/secrets/kubeflow/trainer"
TRAINER_TOKEN_EXPIRY_SECONDS: Final = 3600
TRAINER_TLS_CONFIG_SUFFIX: Final = "-tls-config"  # ConfigMap <job>-tls-config holds the server's CA
TRAINER_CA_KEY: Final = "ca.crt"
TRAINER_TOKEN_KEY: Final = "token"
# Where a v1 job (whose upstream CRD has no trainerStatus) keeps the reported status, and the two
# fields of it that `kubectl get` shows.
ANNOTATION_TRAINER_STATUS: Final = "kubetrain.dev/trainer-status"
ANNOTATION_PROGRESS: Final = "kubetrain.dev/progress"
ANNOTATION_ETA: Final = "kubetrain.dev/eta-seconds"
# Stall recovery: no progress report for this long while every pod runs restarts the pods; after
# max-stalls restarts for a stall the job fails with reason Stalled.
ANNOTATION_STALL_TIMEOUT: Final = "kubetrain.dev/stall-timeout-seconds"
ANNOTATION_MAX_STALLS: Final = "kubetrain.dev/max-stalls"
DEFAULT_MAX_STALLS: Final = 3

# -- GPUs -----------------------------------------------------------------------------------------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_TOLERATION: Final = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# -- the controller -------------------------------------------------------------------------------
MANAGED_BY_KUBETRAIN: Final = "kubetrain.dev/controller"  # jobs only kubetrain reconciles
RUNTIME_PATCH_MANAGER: Final = "kubetrain.dev/builder"  # the manager of the runtime patches the client writes


def managed_by_values(upstream: str) -> tuple[str, ...]:
    """The ``managedBy`` values a job may name: its upstream controller's, kubetrain's, MultiKueue's."""
    return (upstream, MANAGED_BY_KUBETRAIN, MANAGED_BY_MULTIKUEUE)


# -- the dev cluster's process node --------------------------------------------------------------
PROCESS_NODE: Final = "kubetrain-process-node"  # its node name
LABEL_PROCESS_NODE: Final = "kubetrain.dev/process-node"  # also the key of its taint
# Label of every simulated (kwok) node, and the key of their taint on a cluster whose process node is
# the default node (`kubetrain dev up --process-node-default`).
LABEL_SIMULATED_NODE: Final = "kubetrain.dev/simulated"
PROCESS_NODE_PROVISIONER: Final = "kubetrain.dev/local-path"


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


def identity_hash(identity: str) -> str:
    """A label value standing for ``identity`` (any text): 40 hex digits of its SHA-256."""
    return hashlib.sha256(identity.encode()).hexdigest()[:40]
