"""What differs between the Kubeflow v1 kinds: a ``Framework`` per kind, over one build state.

The job logic (pods, services, status, restarts, lifetimes) is written once in
``v1.decisions``. A ``Framework`` holds the kind's facts (``api``,
from the kind registry) and its rules: the env that wires replicas together,
the defaults applied in memory, which replicas decide success. The base class
gives upstream's shared rules (the replica type that decides success is the
first of the kind's ``leaders`` the job has; it is Running while that one
runs); a kind overrides only what differs. ``JobInfo`` is the build state one
reconcile shares between the framework and the pod plugins (``controller.plugins``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar

from kubetrain import naming
from kubetrain.api.kinds import V1Kind
from kubetrain.api.objects import EnvVar, JobIdentity, Obj, Replica, section


@dataclass
class JobInfo(JobIdentity):
    """The shared build state of one reconcile: the job, its defaulted replicas, what plugins found."""

    framework: Framework
    replicas: dict[str, Replica]
    warnings: list[str] = field(default_factory=list)

    @property
    def run_policy(self) -> Obj:
        return section(self.spec, "runPolicy")

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


class Framework:
    """One v1 kind's rules. Subclasses set ``api`` and ``env``, and override what differs from upstream's
    shared rules."""

    api: ClassVar[V1Kind]

    def apply_defaults(self, info: JobInfo) -> None:
        """Kind-specific defaults applied in memory (never written back to the spec)."""

    def env(self, info: JobInfo, rtype: str, index: int) -> list[EnvVar]:
        """Env that wires the replicas together, appended to the pod's containers."""
        raise NotImplementedError

    def env_containers(self, info: JobInfo, pod: Obj) -> list[Obj]:
        """The containers that receive ``env``: all of them, for most kinds."""
        containers: list[Obj] = pod["spec"].get("containers") or []
        return containers

    def required_port(self, info: JobInfo, rtype: str) -> int:
        """The port of ``rtype``'s default container that the env names (upstream refuses the pod without it)."""
        port = info.port(rtype)
        if port is None:
            api = self.api
            raise ValueError(
                f"the {rtype}'s {api.default_container} container has no port named {api.port_name}"
            )
        return port

    def leader(self, info: JobInfo) -> str | None:
        """The replica type that decides success: the first of the kind's leaders the job has."""
        return self.api.leader(info.replicas)

    def is_master_role(self, info: JobInfo, rtype: str, index: int) -> bool:
        """Whether this replica gets the ``job-role=master`` label (and writes the training report):
        the deciding replica type's pods (the first one only, when Workers decide)."""
        return rtype == self.leader(info) and (rtype != "Worker" or index == 0)

    def succeeded(self, info: JobInfo, counts: dict[str, ReplicaCounts], pods: PodsByReplica) -> bool:
        """Whether the job has succeeded: every replica of the deciding type did."""
        leader = self.leader(info)
        return leader is not None and all_succeeded(info, counts, leader)

    def running(self, info: JobInfo, counts: dict[str, ReplicaCounts]) -> bool:
        """Whether the job counts as Running: a replica of the deciding type runs."""
        leader = self.leader(info)
        return leader is not None and any_active(counts, leader)

    def tolerates_failure(self, info: JobInfo, rtype: str) -> bool:
        """Whether a pod of ``rtype`` that failed for good leaves the job running (it fails it, for most)."""
        return False

    def autoscaler(self, info: JobInfo) -> Obj | None:
        """The HorizontalPodAutoscaler the job needs, if any (an elastic PyTorchJob's)."""
        return None


def job_info(job: Obj, framework: Framework) -> JobInfo:
    """Read a job's replica specs into a ``JobInfo`` with upstream's defaults, in the framework's order."""
    api = framework.api
    raw = section(section(job, "spec"), api.replica_field)
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
