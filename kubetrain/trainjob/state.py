"""The build state of one TrainJob reconcile: its pod sets, worked out from the runtime.

``TrainJobInfo`` is what ``trainjob.build`` produces and the ML policies
(``trainjob.policies``) and pod plugins (``controller.plugins``) read and
extend; a ``PodSet`` is one replicated job of the runtime's JobSet template.
Kept apart from the build so the policies and the build import it, not each
other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kubetrain import naming
from kubetrain.api.kinds import TRAINJOB
from kubetrain.api.objects import JobIdentity, Obj, Replica, section
from kubetrain.kube.resources import Resource

TRAINER = "trainer"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
NODE = TRAINJOB.default_container  # the trainer's replicated job and container
DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 Job's default
DEFAULT_RESTART_POLICY = "OnFailure"  # JobSet's default for its Jobs' pods


class BuildError(ValueError):
    """The TrainJob and its runtime do not make a runnable job; the message says which field to fix."""


@dataclass
class PodSet:
    """One replicated job: ``replicas`` Indexed Jobs of ``count`` pods each, from one pod template."""

    name: str
    ancestor: str | None
    replicas: int
    count: int
    template: Obj
    job_spec: Obj
    depends_on: list[Obj] = field(default_factory=list)
    group: str = "default"  # JobSet's groupName

    @property
    def restart_policy(self) -> str:
        return str((self.template.get("spec") or {}).get("restartPolicy") or DEFAULT_RESTART_POLICY)

    @property
    def pods(self) -> int:
        return self.replicas * self.count

    def container(self, name: str) -> Obj | None:
        for container in self.template.get("spec", {}).get("containers") or []:
            if container.get("name") == name:
                found: Obj = container
                return found
        return None


@dataclass
class Extra:
    """An object the ML policy needs beside the pods (MPI's SSH Secret and hostfile ConfigMap).

    ``make`` builds it only when it does not exist yet (an SSH key is generated once).
    """

    resource: Resource
    name: str
    make: Callable[[], Obj]
    retained: bool = False  # a claim the TrainJob does not own: it outlives the TrainJob


@dataclass
class TrainJobInfo(JobIdentity):
    """The shared build state of one TrainJob reconcile; pod plugins read it like a v1 ``JobInfo``.

    ``runtime`` is shared (with the runtime informer's cache, or across passes): read it, never change it.
    """

    runtime: Obj
    jobset: Obj
    pod_sets: list[PodSet]
    subdomain: str
    warnings: list[str] = field(default_factory=list)
    extras: list[Extra] = field(default_factory=list)
    coordinator: str | None = None  # JobSet's coordinator endpoint, labelled on every pod

    # -- what pod plugins (checkpoint, GPU, gang) read, beside the job's identity -------------------
    @property
    def runtime_spec(self) -> Obj:
        return section(self.runtime, "spec")

    @property
    def ml_policy(self) -> Obj:
        return section(self.runtime_spec, "mlPolicy")

    @property
    def replicas(self) -> dict[str, Replica]:
        """The pod sets as v1-style replicas (the gang plugin sums resources over them)."""
        return {s.name: Replica(s.name, s.pods, s.restart_policy, s.template) for s in self.pod_sets}

    @property
    def total_replicas(self) -> int:
        return sum(s.pods for s in self.pod_sets)

    @property
    def run_policy(self) -> Obj:
        """The runtime's ``podGroupPolicy`` in v1 ``schedulingPolicy`` terms, for the gang plugin."""
        policy = self.runtime_spec.get("podGroupPolicy") or {}
        scheduling: Obj = {"minAvailable": self.total_replicas}
        timeout = (policy.get("coscheduling") or {}).get("scheduleTimeoutSeconds")
        if policy.get("coscheduling") is not None:
            scheduling["scheduleTimeoutSeconds"] = 60 if timeout is None else timeout
        queue = (
            (self.jobset.get("metadata") or {}).get("annotations", {}).get(naming.ANNOTATION_VOLCANO_QUEUE)
        )
        if queue:
            scheduling["queue"] = queue
        for pod_set in self.pod_sets:  # the last replicated job that names one wins, as upstream's
            priority = pod_set.template.get("spec", {}).get("priorityClassName")
            if priority:
                scheduling["priorityClass"] = priority
        topology = (policy.get("volcano") or {}).get("networkTopology")
        if topology:
            scheduling["networkTopology"] = topology
        return {"schedulingPolicy": scheduling}

    @property
    def gang_policy(self) -> str | None:
        policy = self.runtime_spec.get("podGroupPolicy") or {}
        return next((k for k in ("coscheduling", "volcano") if policy.get(k) is not None), None)

    # -- what the ML policies read -----------------------------------------------------------------
    def trainer(self) -> PodSet | None:
        """The pod set the TrainJob's ``trainer`` applies to: labelled ancestor=trainer, else named ``node``."""
        for pod_set in self.pod_sets:
            if pod_set.ancestor == TRAINER:
                return pod_set
        return next((s for s in self.pod_sets if s.name == NODE), None)

    def pod_set(self, name: str) -> PodSet | None:
        return next((s for s in self.pod_sets if s.name == name), None)

    def endpoint(self, pod_set: str, job_index: int = 0, pod_index: int = 0) -> str:
        """The stable DNS name of one pod: ``<hostname>.<subdomain>``."""
        return f"{naming.trainjob_hostname(self.name, pod_set, job_index, pod_index)}.{self.subdomain}"
