"""Kubeflow v1 training jobs (group ``kubeflow.org``, version ``v1``).

Field names, enums and defaults are those of the upstream Training Operator
v1.9, so existing manifests and the upstream SDK work unchanged. What the
upstream validating webhook checked is expressed here as CEL rules, so the API
server itself rejects a bad job and no webhook server has to run.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import Field
from pydantic.alias_generators import to_snake

from kubetrain.api.base import ApiModel, cel, k8s_ref, rules

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION: Final = "kubeflow.org/v1"

MANAGED_BY_UPSTREAM = "kubeflow.org/training-operator"
MANAGED_BY_KUBETRAIN = "kubetrain.dev/controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGED_BY_VALUES = (MANAGED_BY_UPSTREAM, MANAGED_BY_KUBETRAIN, MANAGED_BY_MULTIKUEUE)


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class SchedulingPolicy(ApiModel):
    """Gang-scheduling hints."""

    min_available: int | None = Field(None, ge=0)
    queue: Annotated[
        str | None,
        Field(
            json_schema_extra=rules(
                cel(
                    "self == oldSelf",
                    "spec.runPolicy.schedulingPolicy.queue is immutable; create a new job to change it",
                )
            )
        ),
    ] = None
    min_resources: dict[str, int | str] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = Field(None, ge=0)


class RunPolicy(ApiModel):
    """How the job runs: cleanup, lifetimes, retries, gang scheduling, suspension, ownership."""

    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    active_deadline_seconds: int | None = Field(None, ge=0)
    backoff_limit: int | None = Field(None, ge=0)
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = Field(False)
    managed_by: Annotated[
        str | None,
        Field(
            json_schema_extra=rules(
                cel(
                    f"self in {list(MANAGED_BY_VALUES)!r}".replace("'", '"'),
                    "spec.runPolicy.managedBy must be one of "
                    + ", ".join(MANAGED_BY_VALUES)
                    + " (or left unset)",
                ),
                cel("self == oldSelf", "spec.runPolicy.managedBy is immutable"),
            )
        ),
    ] = None


_RUN_POLICY_RULES = rules(
    cel(
        "has(self.managedBy) == has(oldSelf.managedBy)",
        "spec.runPolicy.managedBy is immutable; it cannot be added or removed after creation",
    ),
)


class ReplicaSpec(ApiModel):
    """One replica type: how many pods, their template, how they restart."""

    replicas: int | None = Field(None, ge=0)
    template: Annotated[
        dict[str, Any], Field(json_schema_extra=k8s_ref("io.k8s.api.core.v1.PodTemplateSpec"))
    ] = Field(default_factory=dict)
    restart_policy: RestartPolicy | None = None


class JobCondition(ApiModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_update_time: str | None = None
    last_transition_time: str | None = None


class ReplicaStatus(ApiModel):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    label_selector: dict[str, Any] | None = None
    selector: str | None = None


class JobStatus(ApiModel):
    conditions: list[JobCondition] | None = None
    replica_statuses: dict[str, ReplicaStatus] | None = None
    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None
    restart_count: int | None = Field(
        None,
        description="kubetrain: replica restarts so far (recreated pods and in-place container restarts); "
        "runPolicy.backoffLimit bounds it",
    )
    counted_pod_restarts: dict[str, int] | None = Field(
        None,
        description="kubetrain: per pod uid, the restarts of that pod already in restartCount (a failed pod "
        "to recreate counts one more than its container restarts), so no restart is counted twice",
    )


class ObjectMeta(ApiModel):
    """The part of metadata a manifest author sets."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


def _replica_rules(path: str, *, kinds: tuple[str, ...], container: str) -> list[dict[str, str]]:
    """Rules every v1 kind shares, on its ``<x>ReplicaSpecs`` map."""
    allowed = ", ".join(kinds)
    return [
        cel(
            f"self.all(k, k in {list(kinds)!r})".replace("'", '"'),
            f"{path} keys must be one of {allowed} (exact spelling)",
        ),
        cel(
            "self.all(k, has(self[k].template.spec) && size(self[k].template.spec.containers) > 0)",
            f"{path}[*].template.spec.containers must list at least one container",
        ),
        cel(
            "self.all(k, !has(self[k].template.spec) || self[k].template.spec.containers.all(c, "
            "has(c.image) && c.image != ''))",
            f"{path}[*].template.spec.containers[*].image is required: set the image of every container",
        ),
        cel(
            f"self.all(k, !has(self[k].template.spec) || self[k].template.spec.containers.exists(c, "
            f"c.name == '{container}'))",
            f"{path}[*].template.spec.containers must include a container named {container}",
        ),
    ]


_NAME_RULE = cel(
    "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "metadata.name must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter "
    "(the name becomes part of pod, service and DNS names)",
)


class TrainingJob(ApiModel):
    """Behaviour common to the v1 kinds: where the replica map lives, which types it has."""

    kind_name: ClassVar[str]
    plural: ClassVar[str]
    short_names: ClassVar[tuple[str, ...]]
    replica_field: ClassVar[str]
    replica_types: ClassVar[tuple[str, ...]]

    api_version: Literal["kubeflow.org/v1"] = API_VERSION
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: JobStatus | None = None

    def replica_specs(self) -> dict[str, ReplicaSpec]:
        """The replica map, whatever the kind calls it."""
        specs: dict[str, ReplicaSpec] = getattr(self.spec, to_snake(self.replica_field))  # type: ignore[attr-defined]
        return specs


# -- PyTorchJob ---------------------------------------------------------------------------------


class RdzvConf(ApiModel):
    key: str | None = None
    value: str | None = None


class ElasticPolicy(ApiModel):
    """torchrun elastic settings; the controller turns them into PET_* env."""

    min_replicas: int | None = Field(None, ge=1)
    max_replicas: int | None = Field(None, ge=1)
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = None
    rdzv_port: int | None = Field(None, ge=1, le=65535)
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RdzvConf] | None = None
    standalone: bool | None = None
    n_proc_per_node: int | None = Field(None, ge=1, alias="nProcPerNode")
    max_restarts: int | None = Field(None, ge=0)
    metrics: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.autoscaling.v2.MetricSpec", array=True)
    )


_PYTORCH_PATH = "spec.pytorchReplicaSpecs"


class PyTorchJobSpec(ApiModel):
    run_policy: Annotated[RunPolicy | None, Field(json_schema_extra=_RUN_POLICY_RULES)] = None
    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: Annotated[
        str | None,
        Field(
            json_schema_extra=rules(
                cel(
                    "self in ['auto', 'cpu', 'gpu'] || self.matches('^[1-9][0-9]*$')",
                    "spec.nprocPerNode must be auto, cpu, gpu or a positive integer",
                ),
            )
        ),
    ] = None
    pytorch_replica_specs: Annotated[
        dict[str, ReplicaSpec],
        Field(
            json_schema_extra=rules(
                *_replica_rules(_PYTORCH_PATH, kinds=("Master", "Worker"), container="pytorch"),
                cel(
                    "!has(self.Master) || (has(self.Master.replicas) && self.Master.replicas == 1)",
                    f"{_PYTORCH_PATH}[Master].replicas must be 1: a PyTorchJob has exactly one Master",
                    fieldPath=".Master.replicas",
                ),
                cel(
                    "!has(self.Worker) || !has(self.Worker.replicas) || self.Worker.replicas >= 1",
                    f"{_PYTORCH_PATH}[Worker].replicas must be at least 1; remove the Worker entry for a Master-only job",
                    fieldPath=".Worker.replicas",
                ),
                maxProperties=2,
            )
        ),
    ]


_PYTORCH_SPEC_RULES = rules(
    cel(
        "!has(self.elasticPolicy) || has(self.pytorchReplicaSpecs.Worker)",
        f"{_PYTORCH_PATH}[Worker] must be configured when spec.elasticPolicy is used",
    ),
    cel(
        "!has(self.elasticPolicy) || !has(self.elasticPolicy.nProcPerNode) || !has(self.nprocPerNode)",
        "spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode; use spec.nprocPerNode only",
    ),
    cel(
        "!has(self.elasticPolicy) || !has(self.elasticPolicy.minReplicas) || !has(self.elasticPolicy.maxReplicas)"
        " || self.elasticPolicy.minReplicas <= self.elasticPolicy.maxReplicas",
        "spec.elasticPolicy.minReplicas must not exceed spec.elasticPolicy.maxReplicas",
    ),
)


class PyTorchJob(TrainingJob):
    kind_name: ClassVar[str] = "PyTorchJob"
    plural: ClassVar[str] = "pytorchjobs"
    short_names: ClassVar[tuple[str, ...]] = ("ptj",)
    replica_field: ClassVar[str] = "pytorchReplicaSpecs"
    replica_types: ClassVar[tuple[str, ...]] = ("Master", "Worker")

    kind: Literal["PyTorchJob"] = "PyTorchJob"
    spec: Annotated[PyTorchJobSpec, Field(json_schema_extra=_PYTORCH_SPEC_RULES)]


# -- TFJob --------------------------------------------------------------------------------------

_TF_PATH = "spec.tfReplicaSpecs"


class TFJobSpec(ApiModel):
    run_policy: Annotated[RunPolicy | None, Field(json_schema_extra=_RUN_POLICY_RULES)] = None
    success_policy: Literal["", "AllWorkers"] | None = None
    enable_dynamic_worker: bool | None = None
    tf_replica_specs: Annotated[
        dict[str, ReplicaSpec],
        Field(
            alias="tfReplicaSpecs",
            json_schema_extra=rules(
                *_replica_rules(
                    _TF_PATH, kinds=("Chief", "Master", "PS", "Worker", "Evaluator"), container="tensorflow"
                ),
                cel(
                    "!(has(self.Chief) && has(self.Master))",
                    f"{_TF_PATH} must not have more than 1 Chief or Master role: use Chief or Master, not both",
                ),
                cel(
                    "(!has(self.Chief) || !has(self.Chief.replicas) || self.Chief.replicas <= 1) && "
                    "(!has(self.Master) || !has(self.Master.replicas) || self.Master.replicas <= 1)",
                    f"{_TF_PATH}[Chief/Master].replicas must be 1: there is only one chief",
                ),
                maxProperties=5,
            ),
        ),
    ]


class TFJob(TrainingJob):
    kind_name: ClassVar[str] = "TFJob"
    plural: ClassVar[str] = "tfjobs"
    short_names: ClassVar[tuple[str, ...]] = ("tfj",)
    replica_field: ClassVar[str] = "tfReplicaSpecs"
    replica_types: ClassVar[tuple[str, ...]] = ("Chief", "Master", "PS", "Worker", "Evaluator")

    kind: Literal["TFJob"] = "TFJob"
    spec: TFJobSpec


# -- XGBoostJob ---------------------------------------------------------------------------------

_XGB_PATH = "spec.xgbReplicaSpecs"


class XGBoostJobSpec(ApiModel):
    run_policy: Annotated[RunPolicy | None, Field(json_schema_extra=_RUN_POLICY_RULES)] = None
    xgb_replica_specs: Annotated[
        dict[str, ReplicaSpec],
        Field(
            alias="xgbReplicaSpecs",
            json_schema_extra=rules(
                *_replica_rules(_XGB_PATH, kinds=("Master", "Worker"), container="xgboost"),
                cel(
                    "has(self.Master)", f"{_XGB_PATH}[Master] must be present: an XGBoostJob needs one Master"
                ),
                cel(
                    "!has(self.Master) || (has(self.Master.replicas) && self.Master.replicas == 1)",
                    f"{_XGB_PATH}[Master].replicas must be 1",
                ),
                maxProperties=2,
            ),
        ),
    ]


class XGBoostJob(TrainingJob):
    kind_name: ClassVar[str] = "XGBoostJob"
    plural: ClassVar[str] = "xgboostjobs"
    short_names: ClassVar[tuple[str, ...]] = ("xgbj",)
    replica_field: ClassVar[str] = "xgbReplicaSpecs"
    replica_types: ClassVar[tuple[str, ...]] = ("Master", "Worker")

    kind: Literal["XGBoostJob"] = "XGBoostJob"
    spec: XGBoostJobSpec


# -- PaddleJob ----------------------------------------------------------------------------------

_PADDLE_PATH = "spec.paddleReplicaSpecs"


class PaddleElasticPolicy(ApiModel):
    min_replicas: int | None = Field(None, ge=1)
    max_replicas: int | None = Field(None, ge=1)
    max_restarts: int | None = Field(None, ge=0)
    metrics: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.autoscaling.v2.MetricSpec", array=True)
    )


class PaddleJobSpec(ApiModel):
    run_policy: Annotated[RunPolicy | None, Field(json_schema_extra=_RUN_POLICY_RULES)] = None
    elastic_policy: PaddleElasticPolicy | None = None
    paddle_replica_specs: Annotated[
        dict[str, ReplicaSpec],
        Field(
            json_schema_extra=rules(
                *_replica_rules(_PADDLE_PATH, kinds=("Master", "Worker"), container="paddle"),
                maxProperties=2,
            )
        ),
    ]


class PaddleJob(TrainingJob):
    kind_name: ClassVar[str] = "PaddleJob"
    plural: ClassVar[str] = "paddlejobs"
    short_names: ClassVar[tuple[str, ...]] = ("pdj",)
    replica_field: ClassVar[str] = "paddleReplicaSpecs"
    replica_types: ClassVar[tuple[str, ...]] = ("Master", "Worker")

    kind: Literal["PaddleJob"] = "PaddleJob"
    spec: PaddleJobSpec


# -- JAXJob -------------------------------------------------------------------------------------

_JAX_PATH = "spec.jaxReplicaSpecs"


class JAXJobSpec(ApiModel):
    run_policy: Annotated[RunPolicy | None, Field(json_schema_extra=_RUN_POLICY_RULES)] = None
    jax_replica_specs: Annotated[
        dict[str, ReplicaSpec],
        Field(
            alias="jaxReplicaSpecs",
            json_schema_extra=rules(
                *_replica_rules(_JAX_PATH, kinds=("Worker",), container="jax"),
                maxProperties=1,
            ),
        ),
    ]


class JAXJob(TrainingJob):
    kind_name: ClassVar[str] = "JAXJob"
    plural: ClassVar[str] = "jaxjobs"
    short_names: ClassVar[tuple[str, ...]] = ("jaxj",)
    replica_field: ClassVar[str] = "jaxReplicaSpecs"
    replica_types: ClassVar[tuple[str, ...]] = ("Worker",)

    kind: Literal["JAXJob"] = "JAXJob"
    spec: JAXJobSpec


V1_KINDS: tuple[type[TrainingJob], ...] = (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob)
NAME_RULE = _NAME_RULE
