"""Kubeflow Trainer v2 resources (group ``trainer.kubeflow.org``, version ``v1alpha1``).

The v2.2/v2.3 shape: TrainJob with ``runtimePatches``; TrainingRuntime and
ClusterTrainingRuntime holding a JobSet-shaped template. kubetrain reconciles
the template straight into pods (no JobSet or Job controller), so every JobSet
and Job field is either modelled and carried out, or declared and refused with a
message that names it and says why (``_refused``): an undeclared field would be
dropped by the API server without a word, and the runtime would not do what it
says.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Generic, Literal, TypeVar, cast, get_args

from pydantic import ConfigDict, Field

from kubetrain import naming
from kubetrain.api import kinds
from kubetrain.api.base import ApiModel, Condition, KubetrainStatus, ObjectMeta, cel, k8s_ref, rules

GROUP: Final = kinds.TRAINER_GROUP
VERSION: Final = kinds.TRAINER_VERSION
# A type cannot be computed, so the models' type spells the API version out; a test checks it.
ApiVersion = Literal["trainer.kubeflow.org/v1alpha1"]
API_VERSION: Final = cast(ApiVersion, kinds.TRAINJOB.api_version)

MANAGED_BY_UPSTREAM = naming.MANAGED_BY_TRAINER
MANAGED_BY_VALUES = naming.managed_by_values(MANAGED_BY_UPSTREAM)

_IMMUTABLE = "self == oldSelf"

# The most nodes (pods) a TrainJob's trainer, or one replicated job of a runtime, may ask for: the same
# bound as a v1 replica type (docs/crds.md says why), so one TrainJob cannot make the controller hold
# an unbounded number of pods in memory.
MAX_NODES: Final = 10_000
DNS_LABEL_MAX: Final = 63
DNS_LABEL_PATTERN: Final = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Every pod of a TrainJob has the hostname <trainjob>-<replicated job>-<job index>-<pod index>, a DNS
# label. The shortest suffix any runtime can give is "-a-0-0", so a longer TrainJob name can never run.
# Upstream admits 63 characters; the controller names the real limit of a given runtime when it builds.
TRAINJOB_NAME_MAX: Final = DNS_LABEL_MAX - len("-a-0-0")
TRAINJOB_NAME_RULE: Final = cel(
    f"size(self) <= {TRAINJOB_NAME_MAX}",
    f"metadata.name must be at most {TRAINJOB_NAME_MAX} characters: every pod's hostname is "
    "<name>-<replicated job>-<job index>-<pod index>, which must fit in 63 characters, and the runtime "
    "adds at least 6 (its replicated job names add more)",
)


def _quoted(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _refused(field: str, why: str) -> Any:
    """A JobSet or Job field kubetrain does not carry out: declared, so the API server keeps it long
    enough to refuse it, with a message that names it and says what to do instead."""
    return Field(None, json_schema_extra=rules(cel("false", f"{field} is not supported: {why}")))


class MetadataPatch(ApiModel):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


# -- TrainJob -----------------------------------------------------------------------------------


class RuntimeRef(ApiModel):
    name: str = Field(min_length=1, max_length=253)
    api_group: str | None = Field(kinds.TRAINER_GROUP, max_length=253)
    kind: Literal["TrainingRuntime", "ClusterTrainingRuntime"] | None = Field("ClusterTrainingRuntime")


class InitializerSpec(ApiModel):
    storage_uri: Annotated[
        str | None,
        Field(
            max_length=2048,
            json_schema_extra=rules(
                cel(
                    "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
                    "storageUri must be a URI with a scheme, e.g. hf://org/name or s3://bucket/path",
                ),
            ),
        ),
    ] = None
    env: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.EnvVar", array=True, maxItems=128)
    )
    secret_ref: dict[str, Any] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.LocalObjectReference")
    )


class Initializer(ApiModel):
    dataset: InitializerSpec | None = None
    model: InitializerSpec | None = None


RESERVED_TRAINER_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "DMLC_TRACKER_URI",
    "DMLC_TRACKER_PORT",
    "DMLC_TASK_ID",
    "DMLC_NUM_WORKER",
)


class Trainer(ApiModel):
    image: str | None = Field(None, max_length=500)
    command: list[str] | None = Field(None, max_length=128)
    args: list[str] | None = Field(None, max_length=128)
    env: Annotated[
        list[dict[str, Any]] | None,
        Field(
            json_schema_extra=k8s_ref(
                "io.k8s.api.core.v1.EnvVar",
                array=True,
                maxItems=128,
                **rules(
                    cel(
                        f"self.all(e, !(e.name in {_quoted(RESERVED_TRAINER_ENV)}))",
                        "spec.trainer.env must not set reserved names ("
                        + ", ".join(RESERVED_TRAINER_ENV)
                        + "); the controller sets them",
                    )
                ),
            )
        ),
    ] = None
    num_nodes: int | None = Field(None, ge=0, le=MAX_NODES)
    resources_per_node: dict[str, Any] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.ResourceRequirements")
    )
    num_proc_per_node: int | None = Field(None, ge=1)


class ContainerPatch(ApiModel):
    name: str
    env: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.EnvVar", array=True)
    )
    volume_mounts: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.VolumeMount", array=True)
    )
    security_context: dict[str, Any] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.SecurityContext")
    )


class PodSpecPatch(ApiModel):
    service_account_name: str | None = None
    volumes: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.Volume", array=True, maxItems=128)
    )
    init_containers: list[ContainerPatch] | None = Field(None, max_length=64)
    containers: list[ContainerPatch] | None = Field(None, max_length=64)
    image_pull_secrets: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.LocalObjectReference", array=True)
    )
    security_context: dict[str, Any] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.PodSecurityContext")
    )
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = Field(None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.Affinity"))
    tolerations: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.Toleration", array=True, maxItems=128)
    )
    scheduling_gates: list[dict[str, Any]] | None = Field(
        None, json_schema_extra=k8s_ref("io.k8s.api.core.v1.PodSchedulingGate", array=True, maxItems=16)
    )
    termination_grace_period_seconds: int | None = Field(None, ge=0)


SpecPatchT = TypeVar("SpecPatchT", bound=ApiModel)


class TemplatePatch(ApiModel, Generic[SpecPatchT]):
    """A patch of one of the runtime's nested templates (JobSet, Job, pod): its metadata and its spec."""

    metadata: MetadataPatch | None = None
    spec: SpecPatchT | None = None


class JobSpecPatch(ApiModel):
    template: TemplatePatch[PodSpecPatch] | None = None


class ReplicatedJobPatch(ApiModel):
    name: str
    template: TemplatePatch[JobSpecPatch] | None = None


class JobSetSpecPatch(ApiModel):
    replicated_jobs: list[ReplicatedJobPatch] | None = Field(None, max_length=100)


class TrainingRuntimeSpecPatch(ApiModel):
    template: TemplatePatch[JobSetSpecPatch] | None = None


class RuntimePatch(ApiModel):
    manager: str = Field(min_length=1, max_length=253)
    time: str | None = None
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None


class PodTemplateOverrideTarget(ApiModel):
    name: str


class PodTemplateOverride(ApiModel):
    """The v2.1 form of pod overrides, accepted for compatibility."""

    target_jobs: list[PodTemplateOverrideTarget]
    metadata: MetadataPatch | None = None
    spec: PodSpecPatch | None = None


class TrainJobSpec(ApiModel):
    runtime_ref: Annotated[
        RuntimeRef,
        Field(
            json_schema_extra=rules(
                cel(_IMMUTABLE, "spec.runtimeRef is immutable; create a new TrainJob to use another runtime")
            )
        ),
    ]
    initializer: Annotated[
        Initializer | None, Field(json_schema_extra=rules(cel(_IMMUTABLE, "spec.initializer is immutable")))
    ] = None
    trainer: Annotated[
        Trainer | None,
        Field(
            json_schema_extra=rules(
                cel(_IMMUTABLE, "spec.trainer is immutable; suspend and resubmit to change it")
            )
        ),
    ] = None
    runtime_patches: list[RuntimePatch] | None = Field(None, max_length=16)
    pod_template_overrides: list[PodTemplateOverride] | None = Field(None, max_length=16)
    suspend: bool | None = Field(False)
    active_deadline_seconds: Annotated[
        int | None,
        Field(ge=1, json_schema_extra=rules(cel(_IMMUTABLE, "spec.activeDeadlineSeconds is immutable"))),
    ] = None
    managed_by: Annotated[
        str | None,
        Field(
            max_length=253,
            json_schema_extra=rules(
                cel(
                    f"self in {_quoted(MANAGED_BY_VALUES)}",
                    "spec.managedBy must be one of " + ", ".join(MANAGED_BY_VALUES) + " (or left unset)",
                ),
                cel(_IMMUTABLE, "spec.managedBy is immutable"),
            ),
        ),
    ] = None


_TRAINJOB_SPEC_RULES = rules(
    cel(
        "has(self.managedBy) == has(oldSelf.managedBy)",
        "spec.managedBy is immutable; it cannot be added or removed after creation",
    ),
    cel(
        "has(self.activeDeadlineSeconds) == has(oldSelf.activeDeadlineSeconds)",
        "spec.activeDeadlineSeconds is immutable; it cannot be added or removed after creation",
    ),
    cel(
        "!has(self.runtimePatches) || self.runtimePatches.all(p, p.manager.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/.+$'))",
        "spec.runtimePatches[*].manager must be a domain-prefixed path such as example.com/my-manager",
    ),
    cel(
        "(has(self.suspend) && self.suspend) || (has(oldSelf.suspend) && oldSelf.suspend) || "
        "((has(self.runtimePatches) ? self.runtimePatches : []) == "
        "(has(oldSelf.runtimePatches) ? oldSelf.runtimePatches : []) && "
        "(has(self.podTemplateOverrides) ? self.podTemplateOverrides : []) == "
        "(has(oldSelf.podTemplateOverrides) ? oldSelf.podTemplateOverrides : []))",
        "spec.runtimePatches and spec.podTemplateOverrides may change only while the TrainJob is suspended (or "
        "in the update that suspends or resumes it), as upstream: running pods would not get the change",
    ),
)


class TrainJobCondition(Condition):
    observed_generation: int | None = None


class JobStatus(ApiModel):
    name: str
    ready: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    active: int | None = None
    suspended: int | None = None


class TrainerMetric(ApiModel):
    name: str = Field(max_length=64)
    value: str = Field(max_length=64)


class TrainerStatus(ApiModel):
    progress_percentage: int | None = Field(None, ge=0, le=100)
    estimated_remaining_seconds: int | None = Field(None, ge=0)
    metrics: list[TrainerMetric] | None = Field(None, max_length=256)
    last_updated_time: str | None = None


class TrainJobStatus(KubetrainStatus):
    bookkeeping: ClassVar[tuple[str, ...]] = (
        *KubetrainStatus.bookkeeping,
        "restarts",
        "restartsCountTowardsMax",
        "jobFailures",
        "countedPodRestarts",
        "failedIndexes",
        "jobStartTimes",
    )

    conditions: list[TrainJobCondition] | None = Field(None, max_length=8)
    jobs_status: list[JobStatus] | None = Field(None, max_length=100)
    trainer_status: TrainerStatus | None = None
    # kubetrain runs no JobSet, so JobSet's restart bookkeeping lives here (same names as JobSet's).
    restarts: int | None = Field(
        None, ge=0, description="Restart attempts made under the runtime's failurePolicy."
    )
    restarts_count_towards_max: int | None = Field(
        None, ge=0, description="Restarts that count against failurePolicy.maxRestarts."
    )
    # The Job controller's failure counts, kept where a garbage-collected pod cannot take them back.
    job_failures: dict[str, int] | None = Field(
        None,
        description="kubetrain: per child Job of the current restart attempt, its failures so far (failed "
        "pods and container restarts); its backoffLimit bounds it",
    )
    counted_pod_restarts: dict[str, int] | None = Field(
        None,
        description="kubetrain: per pod uid, the failures of that pod already in jobFailures (bookkeeping)",
    )
    failed_indexes: dict[str, list[int]] | None = Field(
        None,
        description="kubetrain: per child Job of the current restart attempt, its indexes that failed for good "
        "(backoffLimitPerIndex, or a FailIndex rule of its podFailurePolicy)",
    )
    job_start_times: dict[str, str] | None = Field(
        None,
        description="kubetrain: per child Job of the current restart attempt, when it started (its first pod); "
        "its activeDeadlineSeconds counts from there",
    )


class TrainJob(ApiModel):
    api_kind: ClassVar[kinds.Kind] = kinds.TRAINJOB

    api_version: ApiVersion = API_VERSION
    kind: Literal["TrainJob"] = "TrainJob"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: Annotated[TrainJobSpec, Field(json_schema_extra=_TRAINJOB_SPEC_RULES)]
    status: TrainJobStatus | None = None


# -- Runtimes -----------------------------------------------------------------------------------


class EnvInjectionTarget(ApiModel):
    """Containers of one replicated job that get the PET_* env of torchrun, besides the trainer's node container."""

    job_name: str = Field(min_length=1, max_length=253)
    container_names: Annotated[
        list[Annotated[str, Field(max_length=63)]],
        Field(
            min_length=1,
            max_length=8,
            json_schema_extra=rules(
                cel(
                    "!self.exists(c, c == 'node')",
                    "spec.mlPolicy.torch.envInjection.targets[*].containerNames must not include node: the "
                    "trainer's node container always gets the PET_* env",
                ),
                **{"x-kubernetes-list-type": "set"},
            ),
        ),
    ]


class EnvInjection(ApiModel):
    targets: list[EnvInjectionTarget] | None = Field(
        None,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["jobName"]},
    )


class TorchPolicy(ApiModel):
    env_injection: EnvInjection | None = None


class MPIPolicy(ApiModel):
    num_proc_per_node: int | None = Field(1, ge=1)
    mpi_implementation: Literal["OpenMPI", ""] | None = Field("OpenMPI")
    ssh_auth_mount_path: str | None = Field("/root/.ssh", max_length=4096)
    run_launcher_as_node: bool | None = Field(False)


class EmptyPolicy(ApiModel):
    pass


class FluxPolicy(ApiModel):
    num_proc_per_node: int | None = Field(1, ge=1)


class MLPolicy(ApiModel):
    num_nodes: int | None = Field(None, ge=1, le=MAX_NODES)
    torch: TorchPolicy | None = None
    mpi: MPIPolicy | None = None
    jax: EmptyPolicy | None = None
    xgboost: EmptyPolicy | None = None
    flux: FluxPolicy | None = None


_ML_POLICY_RULES = rules(
    cel(
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), has(self.flux)]"
        ".filter(x, x).size() <= 1",
        "mlPolicy must set at most one of torch, mpi, jax, xgboost, flux",
    ),
    cel(
        "!has(self.flux)",
        "spec.mlPolicy.flux is not supported: kubetrain does not run the Flux framework (it has no Flux "
        "operator to hand the pods to); use the mpi policy for HPC-style launches",
    ),
)


class CoschedulingPolicy(ApiModel):
    schedule_timeout_seconds: int | None = Field(60, ge=0)


class VolcanoPolicy(ApiModel):
    network_topology: dict[str, Any] | None = Field(
        None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )


class PodGroupPolicy(ApiModel):
    coscheduling: CoschedulingPolicy | None = None
    volcano: VolcanoPolicy | None = None


_POD_GROUP_RULES = rules(
    cel(
        "!(has(self.coscheduling) && has(self.volcano))",
        "podGroupPolicy must set only one of coscheduling, volcano",
    ),
)


# The reasons a batch/v1 Job fails with (the Job controller's), in the order JobSet's webhook lists them.
JobFailureReason = Literal[
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
]
JOB_FAILURE_REASONS: Final[tuple[str, ...]] = get_args(JobFailureReason)
_JOB = "spec.template.spec.replicatedJobs[*].template.spec"


class PodFailurePolicyOnExitCodes(ApiModel):
    container_name: str | None = Field(None, max_length=63)
    operator: Literal["In", "NotIn"]
    values: list[int] = Field(
        min_length=1, max_length=255, json_schema_extra={"x-kubernetes-list-type": "set"}
    )

    model_config = ConfigDict(
        **ApiModel.model_config,
        json_schema_extra=rules(
            cel(
                "self.operator != 'In' || !self.values.exists(v, v == 0)",
                f"{_JOB}.podFailurePolicy.rules[*].onExitCodes.values must not contain 0 with operator In: a "
                "container that exits 0 has succeeded",
            )
        ),
    )


class PodFailurePolicyOnPodCondition(ApiModel):
    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"] | None = Field("True")


class PodFailurePolicyRule(ApiModel):
    action: Literal["FailJob", "FailIndex", "Ignore", "Count"]
    on_exit_codes: PodFailurePolicyOnExitCodes | None = None
    on_pod_conditions: list[PodFailurePolicyOnPodCondition] | None = Field(None, max_length=20)

    model_config = ConfigDict(
        **ApiModel.model_config,
        json_schema_extra=rules(
            cel(
                "has(self.onExitCodes) != has(self.onPodConditions)",
                f"{_JOB}.podFailurePolicy.rules[*] must set exactly one of onExitCodes, onPodConditions",
            )
        ),
    )


class PodFailurePolicy(ApiModel):
    rules: list[PodFailurePolicyRule] = Field(max_length=20)


_NEEDS_NEVER = "(has(self.template.spec) && has(self.template.spec.restartPolicy) && self.template.spec.restartPolicy == 'Never')"
_JOB_SPEC_RULES = rules(
    cel(
        f"!has(self.podFailurePolicy) || {_NEEDS_NEVER}",
        f"{_JOB}.podFailurePolicy needs the pod template's restartPolicy to be Never (as for a Kubernetes Job): "
        "a container restarted in place never fails its pod",
    ),
    cel(
        f"!has(self.backoffLimitPerIndex) || {_NEEDS_NEVER}",
        f"{_JOB}.backoffLimitPerIndex needs the pod template's restartPolicy to be Never (as for a Kubernetes "
        "Job): failures are counted per pod",
    ),
    cel(
        "!has(self.maxFailedIndexes) || has(self.backoffLimitPerIndex)",
        f"{_JOB}.maxFailedIndexes needs backoffLimitPerIndex: without it no index fails on its own",
    ),
    cel(
        "!has(self.podFailurePolicy) || has(self.backoffLimitPerIndex) || "
        "!self.podFailurePolicy.rules.exists(r, r.action == 'FailIndex')",
        f"{_JOB}.podFailurePolicy: the FailIndex action needs backoffLimitPerIndex",
    ),
)


class JobSpec(ApiModel):
    """A batch/v1 JobSpec: the fields kubetrain's child Jobs carry out, and the others refused."""

    parallelism: int | None = Field(None, ge=0, le=MAX_NODES)
    completions: int | None = Field(None, ge=0, le=MAX_NODES)
    backoff_limit: int | None = Field(None, ge=0)
    backoff_limit_per_index: int | None = Field(None, ge=0)
    max_failed_indexes: int | None = Field(None, ge=0, le=MAX_NODES)
    pod_failure_policy: PodFailurePolicy | None = None
    active_deadline_seconds: int | None = Field(None, ge=1)
    completion_mode: Annotated[
        Literal["Indexed", "NonIndexed"] | None,
        Field(
            json_schema_extra=rules(
                cel(
                    "self == 'Indexed'",
                    f"{_JOB}.completionMode must be Indexed: every pod's rank, hostname and the PET_NODE_RANK "
                    "env come from its completion index",
                )
            )
        ),
    ] = None
    pod_replacement_policy: Annotated[
        Literal["TerminatingOrFailed", "Failed"] | None,
        Field(
            json_schema_extra=rules(
                cel(
                    "self == 'Failed'",
                    f"{_JOB}.podReplacementPolicy must be Failed (or left unset, which means Failed here): a "
                    "replacement pod takes its predecessor's hostname, so it is created once the old pod is gone",
                )
            )
        ),
    ] = None
    success_policy: dict[str, Any] | None = _refused(
        f"{_JOB}.successPolicy",
        "use the JobSet's spec.template.spec.successPolicy, which decides when the TrainJob completes",
    )
    ttl_seconds_after_finished: int | None = _refused(
        f"{_JOB}.ttlSecondsAfterFinished",
        "set spec.template.spec.ttlSecondsAfterFinished (the JobSet's), or the TrainJob's "
        "kubetrain.dev/ttl-seconds-after-finished annotation",
    )
    suspend: bool | None = _refused(f"{_JOB}.suspend", "suspend the TrainJob (its spec.suspend) instead")
    selector: dict[str, Any] | None = _refused(
        f"{_JOB}.selector", "the controller selects the pods it creates"
    )
    manual_selector: bool | None = _refused(
        f"{_JOB}.manualSelector", "the controller selects the pods it creates"
    )
    managed_by: str | None = _refused(
        f"{_JOB}.managedBy", "kubetrain writes no Job objects; set the TrainJob's spec.managedBy"
    )
    template: Annotated[
        dict[str, Any], Field(json_schema_extra=k8s_ref("io.k8s.api.core.v1.PodTemplateSpec"))
    ] = Field(default_factory=dict)


class JobTemplate(ApiModel):
    metadata: MetadataPatch | None = None
    spec: Annotated[JobSpec, Field(json_schema_extra=_JOB_SPEC_RULES)]


ReplicatedJobName = Annotated[str, Field(max_length=DNS_LABEL_MAX)]


class DependsOn(ApiModel):
    name: ReplicatedJobName
    status: Literal["Ready", "Complete"]


class ReplicatedJob(ApiModel):
    # Part of every pod's hostname and of its child Jobs' names: a DNS-1035 label, as JobSet requires.
    name: str = Field(min_length=1, max_length=DNS_LABEL_MAX, pattern=DNS_LABEL_PATTERN)
    group_name: str | None = Field(None, min_length=1, max_length=DNS_LABEL_MAX, pattern=DNS_LABEL_PATTERN)
    replicas: int | None = Field(1, ge=1, le=MAX_NODES)
    depends_on: list[DependsOn] | None = Field(None, max_length=5)
    template: JobTemplate

    model_config = ConfigDict(
        **ApiModel.model_config,
        json_schema_extra=rules(
            cel(
                f"!has(self.replicas) || self.replicas == 1 || !has(self.template.metadata) || "
                f"!has(self.template.metadata.labels) || !('{naming.LABEL_TRAINJOB_ANCESTOR}' in "
                "self.template.metadata.labels)",
                "spec.template.spec.replicatedJobs[*].replicas must be 1 for a replicated job labelled "
                f"{naming.LABEL_TRAINJOB_ANCESTOR} (the trainer and the initializers run as one Job, as upstream)",
            )
        ),
    )


class Network(ApiModel):
    enable_dns_hostnames: bool | None = Field(None, alias="enableDNSHostnames")
    subdomain: str | None = None
    publish_not_ready_addresses: bool | None = None


class SuccessPolicy(ApiModel):
    operator: Literal["All", "Any"]
    target_replicated_jobs: list[ReplicatedJobName] | None = Field(None, max_length=100)


class FailurePolicyRule(ApiModel):
    name: str
    action: Literal[
        "FailJobSet",
        "RestartJobSet",
        "RestartJobSetAndIgnoreMaxRestarts",
        "RestartJob",
        "RestartJobAndIgnoreMaxRestarts",
    ]
    on_job_failure_reasons: list[JobFailureReason] | None = Field(None, max_length=len(JOB_FAILURE_REASONS))
    on_job_failure_message_patterns: list[Annotated[str, Field(max_length=1024)]] | None = Field(
        None, max_length=16
    )
    target_replicated_jobs: list[ReplicatedJobName] | None = Field(None, max_length=100)


_RESTART_STRATEGY_RULES = rules(
    cel(
        "self != 'InPlaceRestart'",
        "spec.template.spec.failurePolicy.restartStrategy InPlaceRestart is not supported (JobSet keeps it behind a "
        "feature gate): use Recreate or BlockingRecreate, which kubetrain both carries out as BlockingRecreate",
    )
)


class FailurePolicy(ApiModel):
    max_restarts: int | None = Field(None, ge=0)
    restart_strategy: Annotated[
        Literal["Recreate", "BlockingRecreate", "InPlaceRestart"] | None,
        Field(json_schema_extra=_RESTART_STRATEGY_RULES),
    ] = None
    rules: list[FailurePolicyRule] | None = Field(None, max_length=64)


class StartupPolicy(ApiModel):
    startup_policy_order: Literal["AnyOrder", "InOrder"]


class Coordinator(ApiModel):
    replicated_job: str = Field(min_length=1, max_length=DNS_LABEL_MAX)
    job_index: int | None = Field(0, ge=0)
    pod_index: int | None = Field(0, ge=0)


class VolumeRetentionPolicy(ApiModel):
    when_deleted: Literal["Delete", "Retain"] | None = None


class VolumeClaimPolicy(ApiModel):
    """Claims shared by the pods that mount a volume of the template's name (``<name>-<trainjob>``)."""

    templates: list[dict[str, Any]] = Field(
        json_schema_extra=k8s_ref("io.k8s.api.core.v1.PersistentVolumeClaimTemplate", array=True)
    )
    retention_policy: VolumeRetentionPolicy | None = None


_JOBSET_SPEC_RULES = rules(
    cel(
        "!has(self.successPolicy) || !has(self.successPolicy.targetReplicatedJobs) || "
        "self.successPolicy.targetReplicatedJobs.all(t, self.replicatedJobs.exists(r, r.name == t))",
        "spec.template.spec.successPolicy.targetReplicatedJobs must name replicated jobs of this runtime: "
        "with an unknown name the job could never succeed",
    ),
    cel(
        "!has(self.coordinator) || self.replicatedJobs.exists(r, r.name == self.coordinator.replicatedJob)",
        "spec.template.spec.coordinator.replicatedJob must name a replicated job of this runtime",
    ),
)


class JobSetSpec(ApiModel):
    replicated_jobs: Annotated[
        list[ReplicatedJob],
        Field(
            max_length=100,
            json_schema_extra=rules(
                cel(
                    "self.size() == 0 || !has(self[0].dependsOn)",
                    "template.spec.replicatedJobs[0].dependsOn must be empty: the first replicated job cannot depend on another",
                ),
                cel(
                    "self.all(r, self.exists_one(x, x.name == r.name))",
                    "spec.template.spec.replicatedJobs[*].name must be unique: two replicated jobs would own the "
                    "same pods",
                ),
                cel(
                    "self.all(r, !has(r.dependsOn) || r.dependsOn.all(d, d.name != r.name && "
                    "self.exists(x, x.name == d.name)))",
                    "spec.template.spec.replicatedJobs[*].dependsOn must name another replicated job of this "
                    "runtime: a job waiting on one that does not exist, or on itself, would never start",
                ),
                cel(
                    f"self.all(r, (has(r.replicas) ? r.replicas : 1) * "
                    f"(has(r.template.spec.parallelism) ? r.template.spec.parallelism : 1) <= {MAX_NODES})",
                    f"spec.template.spec.replicatedJobs[*]: replicas times template.spec.parallelism must be at "
                    f"most {MAX_NODES} pods per replicated job",
                ),
            ),
        ),
    ] = Field(default_factory=list)
    network: Network | None = None
    success_policy: SuccessPolicy | None = None
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy | None = None
    coordinator: Coordinator | None = None
    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    suspend: Annotated[
        bool | None,
        Field(
            json_schema_extra=rules(
                cel(
                    "!self",
                    "spec.template.spec.suspend cannot be true: a runtime does not suspend its TrainJobs (upstream "
                    "overwrites it with the TrainJob's); suspend the TrainJob (its spec.suspend)",
                )
            )
        ),
    ] = None
    managed_by: str | None = _refused(
        "spec.template.spec.managedBy", "kubetrain runs no JobSet; set the TrainJob's spec.managedBy"
    )
    volume_claim_policies: list[VolumeClaimPolicy] | None = None


class JobSetTemplate(ApiModel):
    metadata: MetadataPatch | None = None
    spec: Annotated[JobSetSpec, Field(json_schema_extra=_JOBSET_SPEC_RULES)]


class TrainingRuntimeSpec(ApiModel):
    ml_policy: Annotated[MLPolicy | None, Field(json_schema_extra=_ML_POLICY_RULES)] = None
    pod_group_policy: Annotated[PodGroupPolicy | None, Field(json_schema_extra=_POD_GROUP_RULES)] = None
    template: JobSetTemplate


class Runtime(ApiModel):
    """What both runtime kinds are: the same spec, namespaced or cluster-wide."""

    api_kind: ClassVar[kinds.Kind]

    api_version: ApiVersion = API_VERSION
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainingRuntimeSpec


class TrainingRuntime(Runtime):
    api_kind: ClassVar[kinds.Kind] = kinds.TRAINING_RUNTIME

    kind: Literal["TrainingRuntime"] = "TrainingRuntime"


class ClusterTrainingRuntime(Runtime):
    api_kind: ClassVar[kinds.Kind] = kinds.CLUSTER_TRAINING_RUNTIME

    kind: Literal["ClusterTrainingRuntime"] = "ClusterTrainingRuntime"
