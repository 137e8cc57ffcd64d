"""Kubeflow v1 training jobs (group ``kubeflow.org``, version ``v1``).

Field names, enums and defaults are those of the upstream Training Operator
v1.9, so existing manifests and the upstream SDK work unchanged. What the
upstream validating webhook checked is expressed here as CEL rules, so the API
server itself rejects a bad job and no webhook server has to run.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal, cast

from pydantic import Field
from pydantic.alias_generators import to_snake

from kubetrain import naming
from kubetrain.api import kinds
from kubetrain.api.base import ApiModel, Condition, KubetrainStatus, ObjectMeta, cel, k8s_ref, rules
from kubetrain.api.kinds import JAXJOB, PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB, V1Kind

GROUP: Final = kinds.KUBEFLOW_GROUP
VERSION: Final = kinds.KUBEFLOW_VERSION
# A type cannot be computed, so the models' type spells the API version out; a test checks it.
ApiVersion = Literal["kubeflow.org/v1"]
API_VERSION: Final = cast(ApiVersion, PYTORCHJOB.api_version)

MANAGED_BY_VALUES = naming.managed_by_values(naming.MANAGED_BY_TRAINING_OPERATOR)

# The most pods one replica type may ask for. Large enough for the biggest training clusters run
# today (thousands of nodes), small enough that one job cannot make the controller hold an unbounded
# number of pods, services and expectations in memory. docs/crds.md gives the reasoning.
MAX_REPLICAS: Final = 10_000
# A Service name is a DNS-1035 label: at most 63 characters.
DNS_LABEL_MAX: Final = 63


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


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


class JobSpec(ApiModel):
    """What the spec of every v1 kind has besides its replica map."""

    run_policy: Annotated[RunPolicy | None, Field(json_schema_extra=_RUN_POLICY_RULES)] = None


class ReplicaSpec(ApiModel):
    """One replica type: how many pods, their template, how they restart."""

    replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    template: Annotated[
        dict[str, Any], Field(json_schema_extra=k8s_ref("io.k8s.api.core.v1.PodTemplateSpec"))
    ] = Field(default_factory=dict)
    restart_policy: RestartPolicy | None = None


class JobCondition(Condition):
    last_update_time: str | None = None


class ReplicaStatus(ApiModel):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    label_selector: dict[str, Any] | None = None
    selector: str | None = None


class JobStatus(KubetrainStatus):
    bookkeeping: ClassVar[tuple[str, ...]] = (
        *KubetrainStatus.bookkeeping,
        "restartCount",
        "countedPodRestarts",
        "countedDisruptions",
    )

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
    counted_disruptions: list[str] | None = Field(
        None, description="kubetrain: uids of disrupted pods still present that disruptions counts already"
    )


def _present(kind: V1Kind, rtype: str) -> str:
    """CEL: the replica map has ``rtype`` (in any case, for a kind whose keys may be spelled so)."""
    if kind.replica_keys_any_case:
        return f"self.exists(k, k.lowerAscii() == '{rtype.lower()}')"
    return f"has(self.{rtype})"


def _each(kind: V1Kind, rtype: str, holds: str) -> str:
    """CEL: ``holds`` (an expression over ``{spec}``, the replica spec) is true of ``rtype``, if present."""
    if kind.replica_keys_any_case:
        return f"self.all(k, k.lowerAscii() != '{rtype.lower()}' || ({holds.format(spec='self[k]')}))"
    return f"!has(self.{rtype}) || ({holds.format(spec=f'self.{rtype}')})"


def _key_rules(kind: V1Kind) -> list[dict[str, str]]:
    """The replica map's keys: the kind's replica types, spelled as upstream accepts them."""
    path, types = kind.replica_path, kind.replica_types
    allowed = ", ".join(types)
    if not kind.replica_keys_any_case:
        return [
            cel(
                f"self.all(k, k in {list(types)!r})".replace("'", '"'),
                f"{path} keys must be one of {allowed} (exact spelling)",
            )
        ]
    lowered = [t.lower() for t in types]
    return [
        cel(
            f"self.all(k, k.lowerAscii() in {lowered!r})".replace("'", '"'),
            f"{path} keys must be one of {allowed} (in any case: worker is Worker)",
        ),
        cel(
            "self.all(k, self.exists_one(x, x.lowerAscii() == k.lowerAscii()))",
            f"{path} names a replica type twice, spelled in two cases (Worker and worker are one type); keep one",
        ),
    ]


def _replica_rules(kind: V1Kind) -> list[dict[str, str]]:
    """Rules every v1 kind shares, on its ``<x>ReplicaSpecs`` map."""
    path, container = kind.replica_path, kind.default_container
    return [
        *_key_rules(kind),
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


def replica_specs_field(kind: V1Kind, *extra: dict[str, str]) -> Any:
    """The ``<x>ReplicaSpecs`` field of a v1 kind: the rules every kind shares, then its own."""
    return Field(
        alias=kind.replica_field,
        json_schema_extra=rules(*_replica_rules(kind), *extra, maxProperties=len(kind.replica_types)),
    )


def _decides_success(kind: V1Kind, rtype: str, *, unless: tuple[str, ...] = ()) -> dict[str, str]:
    """``rtype`` decides when the job succeeds (unless one of ``unless`` is present), so it needs a pod.

    The controller counts a replica type as done when all of its replicas succeeded: with
    ``replicas: 0`` that is true at once, and the job would be Succeeded without running anything.
    """
    path = kind.replica_path
    guard = "".join(f"{_present(kind, other)} || " for other in unless)
    when = f" when there is no {' or '.join(unless)}" if unless else ""
    where = {} if kind.replica_keys_any_case else {"fieldPath": f".{rtype}.replicas"}
    return cel(
        guard + _each(kind, rtype, "!has({spec}.replicas) || {spec}.replicas >= 1"),
        f"{path}[{rtype}].replicas must be at least 1{when}: the {rtype} decides when the job succeeds, "
        "and with no pod the job would succeed without running anything",
        **where,
    )


def _needs_a_leader(kind: V1Kind) -> dict[str, str]:
    """At least one of the replica types that decide success: without them the job would never end."""
    path, rtypes = kind.replica_path, kind.leaders
    listed = rtypes[0] if len(rtypes) == 1 else f"{', '.join(rtypes[:-1])} or {rtypes[-1]}"
    return cel(
        " || ".join(_present(kind, rtype) for rtype in rtypes),
        f"{path} must have a {listed}: it decides when the job succeeds; add one",
    )


def service_name_rule(replica_field: str) -> dict[str, str]:
    """A rule at the root of a v1 kind: every child Service name fits in a DNS-1035 label.

    Each replica gets a Service (and a pod hostname) ``<job>-<replica type>-<index>``; the CRD's
    63-character limit on the job name alone still lets those exceed 63, and the API server would then
    refuse every Service. The message says how long the name may be for this spec.
    """
    specs = f"self.spec.{replica_field}"
    count = f"{specs}[k].replicas"  # unset means 1; a type with 0 replicas has no Service
    last_index = f"(has({count}) && {count} > 1 ? {count} - 1 : 0)"
    suffix = f"(has({count}) && {count} == 0 ? 0 : size(k) + 2 + size(string({last_index})))"
    longest_name = f"({DNS_LABEL_MAX} - {specs}.map(k, {suffix}).max())"
    # string(int) in a message is costed as an unbounded string; a list of literals indexed is not.
    as_text = "[" + ", ".join(f"'{n}'" for n in range(DNS_LABEL_MAX + 1)) + "]"
    clamped = f"({longest_name} < 0 ? 0 : {longest_name})"
    return cel(
        f"!has(self.metadata.name) || {specs}.all(k, size(self.metadata.name) + {suffix} <= {DNS_LABEL_MAX})",
        f"metadata.name is too long for this job: its Services are named <name>-<replica type>-<index> "
        f"and a Service name has at most {DNS_LABEL_MAX} characters; use a shorter name",
        messageExpression=(
            f"'metadata.name is too long for this job: its Services are named <name>-<replica type>-<index> "
            f"and a Service name has at most {DNS_LABEL_MAX} characters; use a name of at most ' + "
            f"{as_text}[{clamped}] + ' characters'"
        ),
        fieldPath=".metadata.name",
    )


_NAME_RULE = cel(
    "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "metadata.name must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter "
    "(the name becomes part of pod, service and DNS names)",
)


class TrainingJob(ApiModel):
    """Behaviour common to the v1 kinds: where the replica map lives, which types it has."""

    api_kind: ClassVar[V1Kind]

    api_version: ApiVersion = API_VERSION
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: JobStatus | None = None

    def replica_specs(self) -> dict[str, ReplicaSpec]:
        """The replica map, whatever the kind calls it."""
        specs: dict[str, ReplicaSpec] = getattr(self.spec, to_snake(self.api_kind.replica_field))  # type: ignore[attr-defined]
        return specs


# -- PyTorchJob ---------------------------------------------------------------------------------


class RdzvConf(ApiModel):
    key: str | None = None
    value: str | None = None


class ElasticPolicy(ApiModel):
    """torchrun elastic settings; the controller turns them into PET_* env."""

    min_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    max_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS)
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


class PyTorchJobSpec(JobSpec):
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
    pytorch_replica_specs: dict[str, ReplicaSpec] = replica_specs_field(
        PYTORCHJOB,
        _needs_a_leader(PYTORCHJOB),
        cel(
            "!has(self.Master) || (has(self.Master.replicas) && self.Master.replicas == 1)",
            f"{PYTORCHJOB.replica_path}[Master].replicas must be 1: a PyTorchJob has exactly one Master",
            fieldPath=".Master.replicas",
        ),
        cel(
            "!has(self.Worker) || !has(self.Worker.replicas) || self.Worker.replicas >= 1",
            f"{PYTORCHJOB.replica_path}[Worker].replicas must be at least 1; remove the Worker entry for a Master-only job",
            fieldPath=".Worker.replicas",
        ),
    )


_PYTORCH_SPEC_RULES = rules(
    cel(
        f"!has(self.elasticPolicy) || has(self.{PYTORCHJOB.replica_field}.Worker)",
        f"{PYTORCHJOB.replica_path}[Worker] must be configured when spec.elasticPolicy is used",
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
    api_kind: ClassVar[V1Kind] = PYTORCHJOB

    kind: Literal["PyTorchJob"] = "PyTorchJob"
    spec: Annotated[PyTorchJobSpec, Field(json_schema_extra=_PYTORCH_SPEC_RULES)]


# -- TFJob --------------------------------------------------------------------------------------


class TFJobSpec(JobSpec):
    success_policy: Literal["", "AllWorkers"] | None = None
    enable_dynamic_worker: bool | None = None
    tf_replica_specs: dict[str, ReplicaSpec] = replica_specs_field(
        TFJOB,
        cel(
            f"!({_present(TFJOB, 'Chief')} && {_present(TFJOB, 'Master')})",
            f"{TFJOB.replica_path} must not have more than 1 Chief or Master role: use Chief or Master, not both",
        ),
        cel(
            " && ".join(
                f"({_each(TFJOB, t, '!has({spec}.replicas) || {spec}.replicas == 1')})"
                for t in ("Chief", "Master")
            ),
            f"{TFJOB.replica_path}[Chief/Master].replicas must be 1: there is only one chief, and it decides "
            "when the job succeeds (with 0 the job would succeed without running anything)",
        ),
        _needs_a_leader(TFJOB),
        _decides_success(TFJOB, "Worker", unless=("Chief", "Master")),
    )


class TFJob(TrainingJob):
    api_kind: ClassVar[V1Kind] = TFJOB

    kind: Literal["TFJob"] = "TFJob"
    spec: TFJobSpec


# -- XGBoostJob ---------------------------------------------------------------------------------


class XGBoostJobSpec(JobSpec):
    xgb_replica_specs: dict[str, ReplicaSpec] = replica_specs_field(
        XGBOOSTJOB,
        cel(
            "has(self.Master)",
            f"{XGBOOSTJOB.replica_path}[Master] must be present: an XGBoostJob needs one Master",
        ),
        cel(
            "!has(self.Master) || (has(self.Master.replicas) && self.Master.replicas == 1)",
            f"{XGBOOSTJOB.replica_path}[Master].replicas must be 1",
        ),
    )


class XGBoostJob(TrainingJob):
    api_kind: ClassVar[V1Kind] = XGBOOSTJOB

    kind: Literal["XGBoostJob"] = "XGBoostJob"
    spec: XGBoostJobSpec


# -- PaddleJob ----------------------------------------------------------------------------------


class PaddleElasticPolicy(ApiModel):
    min_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    max_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    max_restarts: int | None = Field(None, ge=0)
    metrics: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.autoscaling.v2.MetricSpec", array=True)
    )


class PaddleJobSpec(JobSpec):
    elastic_policy: PaddleElasticPolicy | None = None
    paddle_replica_specs: dict[str, ReplicaSpec] = replica_specs_field(
        PADDLEJOB,
        _needs_a_leader(PADDLEJOB),
        _decides_success(PADDLEJOB, "Master"),
        _decides_success(PADDLEJOB, "Worker", unless=("Master",)),
    )


class PaddleJob(TrainingJob):
    api_kind: ClassVar[V1Kind] = PADDLEJOB

    kind: Literal["PaddleJob"] = "PaddleJob"
    spec: PaddleJobSpec


# -- JAXJob -------------------------------------------------------------------------------------


class JAXJobSpec(JobSpec):
    jax_replica_specs: dict[str, ReplicaSpec] = replica_specs_field(
        JAXJOB,
        _needs_a_leader(JAXJOB),
        _decides_success(JAXJOB, "Worker"),
    )


class JAXJob(TrainingJob):
    api_kind: ClassVar[V1Kind] = JAXJOB

    kind: Literal["JAXJob"] = "JAXJob"
    spec: JAXJobSpec


V1_KINDS: tuple[type[TrainingJob], ...] = (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob)
NAME_RULE = _NAME_RULE
