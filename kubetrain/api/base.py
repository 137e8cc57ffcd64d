"""Building blocks shared by every resource model.

Models are pydantic v2 with camelCase aliases, so a manifest read from YAML
validates as-is and dumps back to the same shape. Three markers carry CRD
facts that JSON Schema cannot express; the CRD generator (``crdgen``) reads
them:

* ``k8s_ref(name)``: the field holds a Kubernetes core type (a pod template, a
  toleration list, ...). Its schema is taken from the OpenAPI the API server
  serves, not written by hand.
* ``cel(rule, message)``: an ``x-kubernetes-validations`` rule. Messages name
  the field and say what to do, because they reach users verbatim.
* ``int_or_string()``: the Kubernetes int-or-string union.

Both API versions build on the same pieces here: the metadata a manifest sets,
the fields every status condition has, and the status fields kubetrain adds
to upstream's jobs (``KubetrainStatus``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

K8S_REF = "x-kubetrain-k8s-ref"
VALIDATIONS = "x-kubernetes-validations"


class ApiModel(BaseModel):
    """Base of every model: camelCase on the wire, unknown fields kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def k8s_ref(name: str, **extra: Any) -> dict[str, Any]:
    """Schema marker for a field of Kubernetes core type ``name`` (e.g. ``io.k8s.api.core.v1.PodTemplateSpec``)."""
    return {K8S_REF: name, **extra}


def cel(rule: str, message: str, **extra: Any) -> dict[str, str]:
    """One CEL validation rule with a message that names the field."""
    return {"rule": rule, "message": message, **extra}


def rules(*items: dict[str, str], **extra: Any) -> dict[str, Any]:
    """``json_schema_extra`` carrying CEL rules."""
    return {VALIDATIONS: list(items), **extra}


def int_or_string() -> dict[str, Any]:
    return {"x-kubernetes-int-or-string": True}


class FirstFailure(ApiModel):
    """kubetrain: the replica whose failure came first, for ``status.firstFailure`` of a failed job."""

    replica_type: str = Field(description="the replica type (v1) or replicated job (TrainJob)")
    index: int = Field(description="the replica index (v1) or child Job index (TrainJob)")
    pod: str
    node: str | None = None
    time: str | None = Field(None, description="when its container ended")
    exit_code: int | None = None
    reason: str | None = Field(None, description="the kubelet's or the scheduler's reason")
    category: str = Field(
        description="OOMKilled, GPUOutOfMemory, CommunicationFailure, CUDAError, PythonException, Signalled, "
        "ExitCode, ImagePull, Unschedulable, Disrupted or Evicted"
    )
    summary: str = Field(description="one line: the exception, the error line, the scheduler's message")
    log_tail: str | None = Field(None, description="the last lines that container wrote")


class ObjectMeta(ApiModel):
    """The part of metadata a manifest author sets."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Condition(ApiModel):
    """The fields every status condition has (each API version adds one of its own)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class KubetrainStatus(ApiModel):
    """The status fields kubetrain adds to every job kind (upstream's CRDs have none of them)."""

    # Where the controller keeps its restart bookkeeping: fields upstream's CRDs do not have, so a CRD
    # without them would prune them and a job would never reach its retry limit. Each kind adds its own.
    bookkeeping: ClassVar[tuple[str, ...]] = ("disruptions", "stalls", "lastStallTime")

    disruptions: int | None = Field(
        None,
        ge=0,
        description="kubetrain: pods stopped by a disruption (preemption, eviction, drain, node loss) so far; "
        "they are recreated (a TrainJob restarts every pod) without counting toward the job's retry limit "
        "(a v1 job's runPolicy.backoffLimit, a TrainJob's failurePolicy.maxRestarts)",
    )
    disrupted_gpu_seconds: int | None = Field(
        None,
        ge=0,
        alias="disruptedGPUSeconds",
        description="kubetrain: GPU-seconds of the pod runs disruptions cut short (the disrupted pods and "
        "the peers stopped with them, each from its start to the disruption); the work since the last "
        "checkpoint is what is done again, none when the training saves on SIGTERM",
    )
    stalls: int | None = Field(
        None, ge=0, description="kubetrain: restarts because no progress was reported for the stall timeout"
    )
    last_stall_time: str | None = Field(
        None, description="kubetrain: when the job was last restarted for a stall"
    )
    first_failure: FirstFailure | None = Field(
        None,
        description="kubetrain: the replica (a TrainJob's node) that failed first, and why (set when the job "
        "fails)",
    )
