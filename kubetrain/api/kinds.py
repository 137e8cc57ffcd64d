"""The kinds kubetrain serves, each written out once: the one registry of what tells them apart.

Eight kinds: the five Kubeflow v1 jobs (``kubeflow.org/v1``), TrainJob and its two runtimes
(``trainer.kubeflow.org/v1alpha1``). For each, its API identity (group, version, plural, short
names, scope) and, for the jobs, what the controller and the clients need: the condition that says it
succeeded, the container whose logs are the training logs; for the v1 jobs also where the replica map
lives, the replica types in upstream's order, the replica types that decide success, the default
port, restart policy and the names upstream's metrics and labels use.

The models (``v1``, ``v2``), the CRDs, the job client, the CLI, the controller's frameworks and the
Airflow provider read these facts from here; ``tests/unit/test_kinds_registry.py`` fails when a
module writes one out again. The values are upstream's (Kubeflow Training Operator v1.9, Trainer
v2), so manifests and SDKs written for upstream work unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Final, TypeVar

from kubetrain.kube.resources import Resource

KUBEFLOW_GROUP: Final = "kubeflow.org"
KUBEFLOW_VERSION: Final = "v1"
TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A kind's API identity."""

    kind: str
    group: str
    version: str
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        """The name of the kind's CustomResourceDefinition: ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def scope(self) -> str:
        """The CRD's scope: ``Namespaced`` or ``Cluster``."""
        return "Namespaced" if self.namespaced else "Cluster"

    @cached_property
    def resource(self) -> Resource:
        """The API resource, for the Kubernetes runtime's client and informers."""
        return Resource(self.group, self.version, self.plural, self.kind, namespaced=self.namespaced)

    def names(self) -> tuple[str, ...]:
        """Every name a user may call the kind by, lower case: kind, plural, short names."""
        return (self.singular, self.plural, *self.short_names)


@dataclass(frozen=True, kw_only=True)
class JobKind(Kind):
    """A kind that runs training: it succeeds or fails."""

    success: str  # the condition type a succeeded job has True (Failed is the same for every kind)
    default_container: str  # the container whose logs are the training logs (rank 0's report too)

    @property
    def is_v1(self) -> bool:
        return isinstance(self, V1Kind)


@dataclass(frozen=True, kw_only=True)
class V1Kind(JobKind):
    """A Kubeflow v1 job: replica types, each a set of identical pods, and upstream's defaults."""

    success: str = "Succeeded"
    replica_field: str  # where the replica map lives in the spec
    replica_types: tuple[str, ...]  # upstream's order
    # The replica types that decide when the job succeeds and counts as running: the first of these
    # the job has (a PyTorchJob's Master, else its Workers).
    leaders: tuple[str, ...]
    port_name: str  # the port upstream adds to the default container when the template has none
    default_port: int
    default_restart_policy: str
    controller_name: str  # the ``training.kubeflow.org/operator-name`` label value
    framework_label: str  # the ``framework`` label of upstream's job metrics
    scaled_replica: str | None = None  # the replica type the CRD's scale subresource resizes, if any
    # Whether the replica map's keys may be spelled in any case (``worker``, ``ps``): upstream's webhook
    # lets them through for TFJob only, and its defaulting renames them to the canonical spelling.
    replica_keys_any_case: bool = False

    @property
    def replica_path(self) -> str:
        """The replica map's field path, as messages name it: ``spec.<replica field>``."""
        return f"spec.{self.replica_field}"

    def leader(self, present: Iterable[str]) -> str | None:
        """The replica type that decides success among those a job has."""
        have = set(present)
        return next((rtype for rtype in self.leaders if rtype in have), None)


def _kubeflow(  # noqa: PLR0917 (positional, so each kind below reads as one row of a table)
    kind: str,
    short: str,
    replica_field: str,
    replica_types: tuple[str, ...],
    leaders: tuple[str, ...],
    container: str,
    port: tuple[str, int],
    restart_policy: str,
    *,
    scaled_replica: str | None = None,
    replica_keys_any_case: bool = False,
) -> V1Kind:
    """A Kubeflow v1 job kind; its plural, operator-name label and metrics label follow upstream's pattern."""
    return V1Kind(
        kind=kind,
        group=KUBEFLOW_GROUP,
        version=KUBEFLOW_VERSION,
        plural=f"{kind.lower()}s",
        short_names=(short,),
        replica_field=replica_field,
        replica_types=replica_types,
        leaders=leaders,
        default_container=container,
        port_name=port[0],
        default_port=port[1],
        default_restart_policy=restart_policy,
        controller_name=f"{kind.lower()}-controller",
        framework_label=container,
        scaled_replica=scaled_replica,
        replica_keys_any_case=replica_keys_any_case,
    )


# kind, short name, replica map, replica types in upstream's order, the types that decide success (the
# first the job has), default container, its port (name, number), restart policy. The CRDs of PyTorchJob,
# PaddleJob and JAXJob have upstream's scale subresource on their Workers (``kubectl scale``, an HPA; an
# elastic PyTorchJob's autoscaler resizes them through it).
PYTORCHJOB: Final = _kubeflow("PyTorchJob", "ptj", "pytorchReplicaSpecs", ("Master", "Worker"), ("Master", "Worker"), "pytorch", ("pytorchjob-port", 23456), "OnFailure", scaled_replica="Worker")  # fmt: skip
TFJOB: Final = _kubeflow("TFJob", "tfj", "tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator"), ("Chief", "Master", "Worker"), "tensorflow", ("tfjob-port", 2222), "Never", replica_keys_any_case=True)  # fmt: skip
XGBOOSTJOB: Final = _kubeflow("XGBoostJob", "xgbj", "xgbReplicaSpecs", ("Master", "Worker"), ("Master",), "xgboost", ("xgboostjob-port", 9999), "Never")  # fmt: skip
PADDLEJOB: Final = _kubeflow("PaddleJob", "pdj", "paddleReplicaSpecs", ("Master", "Worker"), ("Master", "Worker"), "paddle", ("master", 36543), "OnFailure", scaled_replica="Worker")  # fmt: skip
JAXJOB: Final = _kubeflow("JAXJob", "jaxj", "jaxReplicaSpecs", ("Worker",), ("Worker",), "jax", ("jaxjob-port", 6666), "Never", scaled_replica="Worker")  # fmt: skip
# The trainer's container is also the name of the replicated job whose first pod is rank 0.
TRAINJOB: Final = JobKind(kind="TrainJob", group=TRAINER_GROUP, version=TRAINER_VERSION, plural="trainjobs", short_names=("tj",), success="Complete", default_container="node")  # fmt: skip
TRAINING_RUNTIME: Final = Kind(kind="TrainingRuntime", group=TRAINER_GROUP, version=TRAINER_VERSION, plural="trainingruntimes", short_names=("tr",))  # fmt: skip
CLUSTER_TRAINING_RUNTIME: Final = Kind(kind="ClusterTrainingRuntime", group=TRAINER_GROUP, version=TRAINER_VERSION, plural="clustertrainingruntimes", short_names=("ctr",), namespaced=False)  # fmt: skip

V1_JOBS: Final[tuple[V1Kind, ...]] = (PYTORCHJOB, TFJOB, XGBOOSTJOB, PADDLEJOB, JAXJOB)
JOBS: Final[tuple[JobKind, ...]] = (*V1_JOBS, TRAINJOB)
RUNTIMES: Final[tuple[Kind, ...]] = (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME)
ALL: Final[tuple[Kind, ...]] = (*JOBS, *RUNTIMES)


K = TypeVar("K", bound=Kind)


def _find(name: str, among: tuple[K, ...], what: str) -> K:
    """The kind ``name`` names, by any of its names or, as kubectl takes them, ``NAME.GROUP``
    (``pytorchjob.kubeflow.org``, what ``kubectl get -o name`` prints)."""
    lowered, _, group = name.lower().partition(".")
    for kind in among:
        if lowered in kind.names() and group in ("", kind.group):
            return kind
    raise ValueError(f"unknown {what} {name!r}; choose from {', '.join(k.kind for k in among)}")


def any_kind(name: str) -> Kind:
    """Any of the eight kinds by any of its names, case-insensitively."""
    return _find(name, ALL, "kind")


def job_kind(name: str) -> JobKind:
    """A job kind by any of its names, case-insensitively (``PyTorchJob``, ``pytorchjobs``, ``ptj``)."""
    return _find(name, JOBS, "job kind")


def v1_kind(name: str) -> V1Kind:
    """A Kubeflow v1 job kind by any of its names, case-insensitively."""
    return _find(name, V1_JOBS, "job kind")
