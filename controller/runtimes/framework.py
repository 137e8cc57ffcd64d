"""The plugin framework of the v1 job controller.

The job logic (pods, services, status, restarts, lifetimes) is written once in
``reconcilers.v1job``. What differs between PyTorch, TensorFlow, XGBoost,
Paddle and JAX is a ``Framework``: replica types, the default container and
port, the env that wires replicas together, and which replica decides success.
What cuts across frameworks (checkpoint env, GPU tolerations, gang scheduling,
the master-wait init container) is a ``PodPlugin`` that decorates each pod.
Plugins share one build-state object, ``JobInfo``, and never call each other:
the Trainer v2 plugin idea, in Python.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kubetrain import naming
from kubetrain.api.kinds import V1Kind

Obj = dict[str, Any]
EnvVar = dict[str, Any]


@dataclass
class Replica:
    """One replica type of a job, with defaults applied.

    ``template`` is the job's own pod template, shared with the cache: read it, never change it;
    ``JobInfo.pod_template`` hands out a private, defaulted copy for building a pod.
    """

    rtype: str
    replicas: int
    restart_policy: str
    template: Obj


@dataclass
class JobIdentity:
    """A job object, read the way its children need it: names, spec, annotations, owner reference.

    The base of the build state of every kind (``JobInfo``, a TrainJob's ``TrainJobInfo``).
    """

    job: Obj

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.job["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.job["metadata"]["uid"])

    @property
    def spec(self) -> Obj:
        spec: Obj = self.job.get("spec") or {}
        return spec

    @property
    def annotations(self) -> dict[str, str]:
        annotations: dict[str, str] = self.job["metadata"].get("annotations") or {}
        return annotations

    def owner_reference(self) -> Obj:
        """The reference that makes the job the controller of a child (deleted with it)."""
        return {
            "apiVersion": self.job["apiVersion"],
            "kind": self.job["kind"],
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass
class JobInfo(JobIdentity):
    """The shared build state of one reconcile: the job, its defaulted replicas, what plugins found."""

    framework: Framework
    replicas: dict[str, Replica]
    warnings: list[str] = field(default_factory=list)

    @property
    def run_policy(self) -> Obj:
        policy: Obj = self.spec.get("runPolicy") or {}
        return policy

    @property
    def total_replicas(self) -> int:
        return sum(r.replicas for r in self.replicas.values())

    def default_container(self, template: Obj) -> Obj | None:
        """The container named after the framework (``pytorch``...), else the first one."""
        containers: list[Obj] = template.get("spec", {}).get("containers") or []
        for container in containers:
            if container.get("name") == self.framework.api.default_container:
                return container
        return containers[0] if containers else None

    def pod_template(self, rtype: str) -> Obj:
        """A private copy of ``rtype``'s template with upstream's default: the framework's port on its container."""
        template = copy.deepcopy(self.replicas[rtype].template)
        container = self.default_container(template)
        api = self.framework.api
        if container is not None:
            ports = container.setdefault("ports", [])
            if not any(p.get("name") == api.port_name for p in ports):
                ports.append({"name": api.port_name, "containerPort": api.default_port})
        return template

    def port(self, rtype: str, name: str | None = None, default: int | None = None) -> int | None:
        """A named port of ``rtype``'s default container (the framework's port, defaulted, when no name is given)."""
        replica = self.replicas.get(rtype)
        if replica is None:
            return default
        container = self.default_container(replica.template)
        api = self.framework.api
        wanted = name or api.port_name
        for port in (container or {}).get("ports") or []:
            if port.get("name") == wanted:
                return int(port["containerPort"])
        if wanted == api.port_name and container is not None:
            return api.default_port
        return default


@dataclass(frozen=True)
class ReplicaCounts:
    """What the pods of one replica type are doing right now."""

    active: int = 0
    succeeded: int = 0
    failed: int = 0


PodsByReplica = dict[tuple[str, int], Obj]


def all_succeeded(info: JobInfo, counts: dict[str, ReplicaCounts], rtype: str) -> bool:
    """Every replica of ``rtype`` has succeeded."""
    replica = info.replicas.get(rtype)
    return replica is not None and counts.get(rtype, ReplicaCounts()).succeeded >= replica.replicas


def any_active(counts: dict[str, ReplicaCounts], rtype: str) -> bool:
    return counts.get(rtype, ReplicaCounts()).active > 0


class Framework(Protocol):
    """Everything that differs between the v1 kinds: the kind's facts (``api``, from the registry) and
    the rules upstream's controller for that kind follows."""

    api: V1Kind

    def apply_defaults(self, info: JobInfo) -> None:
        """Kind-specific defaults applied in memory (never written back to the spec)."""

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        """Env that wires the replicas together, appended to the pod's containers."""

    def env_containers(self, info: JobInfo, pod: Obj) -> list[Obj]:
        """The containers that receive ``env`` (all of them, for most frameworks)."""

    def is_master_role(self, info: JobInfo, rtype: str, index: int) -> bool:
        """Whether this replica gets the ``job-role=master`` label (and writes the training report)."""

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        """Whether the job has succeeded, by the framework's rule (e.g. the Master completed)."""

    def running(self, info: JobInfo, counts: dict[str, ReplicaCounts]) -> bool:
        """Whether the job counts as Running (e.g. the Master is running)."""


@runtime_checkable
class PodPlugin(Protocol):
    """A cross-framework plugin that decorates every pod the controller builds."""

    name: str

    def decorate_pod(self, info: JobInfo, rtype: str, index: int, pod: Obj) -> None: ...


class JobView(Protocol):
    """What the cross-kind plugins (checkpoint, GPU, gang) read of a job: a v1 ``JobInfo`` or a
    TrainJob's build state alike."""

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def annotations(self) -> dict[str, str]: ...

    @property
    def run_policy(self) -> Obj: ...

    @property
    def replicas(self) -> dict[str, Replica]: ...

    @property
    def total_replicas(self) -> int: ...

    @property
    def warnings(self) -> list[str]: ...

    def owner_reference(self) -> Obj: ...


class SharedPodPlugin(Protocol):
    """A plugin that decorates the pods of every kind, v1 jobs and TrainJobs alike."""

    name: str

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None: ...


def job_info(job: Obj, framework: Framework) -> JobInfo:
    """Read a job's replica specs into a ``JobInfo`` with upstream's defaults, in the framework's order."""
    api = framework.api
    raw: Obj = (job.get("spec") or {}).get(api.replica_field) or {}
    canonical = {t.lower(): t for t in api.replica_types}
    replicas: dict[str, Replica] = {}
    for key, spec in raw.items():
        rtype = canonical.get(key.lower(), key)
        count = spec.get("replicas")
        replicas[rtype] = Replica(
            rtype=rtype,
            replicas=1 if count is None else int(count),
            restart_policy=spec.get("restartPolicy") or api.default_restart_policy,
            template=spec.get("template") or {},
        )
    order = {t: i for i, t in enumerate(api.replica_types)}
    ordered = dict(sorted(replicas.items(), key=lambda item: order.get(item[0], len(order))))
    info = JobInfo(job=job, framework=framework, replicas=ordered)
    framework.apply_defaults(info)
    return info


def env_value(name: str, value: str | int) -> EnvVar:
    return {"name": name, "value": str(value)}


def replica_labels(info: JobInfo, rtype: str, index: int | None = None) -> dict[str, str]:
    labels = {
        naming.LABEL_OPERATOR_NAME: info.framework.api.controller_name,
        naming.LABEL_JOB_NAME: info.name.replace("/", "-"),
        naming.LABEL_REPLICA_TYPE: rtype.lower(),
    }
    if index is not None:
        labels[naming.LABEL_REPLICA_INDEX] = str(index)
    return labels
