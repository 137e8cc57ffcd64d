"""Gang scheduling: all of a job's pods are placed together, or none is.

Three schedulers are supported, chosen with ``--gang-scheduler-name``, one
class each over what they share (``GangScheduler``: the group's size and
resources, the PodGroup around the scheduler's spec):

* ``kubernetes`` (``NativeGang``): the scheduler's native gang scheduling
  (Kubernetes 1.36, ``scheduling.k8s.io/v1alpha2`` PodGroup with
  ``schedulingPolicy.gang.minCount``; pods point at it with
  ``spec.schedulingGroup``). No second scheduler to run.
* ``volcano`` (``Volcano``): a Volcano ``PodGroup`` and the ``volcano``
  scheduler; pods are only created once Volcano has admitted the group
  (upstream's behaviour).
* any other name (``Coscheduling``): the scheduler-plugins coscheduling
  ``PodGroup``, with that name as the pods' ``schedulerName`` (upstream's
  ``scheduler-plugins``).

``minMember``/``minCount`` is ``runPolicy.schedulingPolicy.minAvailable`` or every
replica of the job. The group is named after the job and owned by it.

A TrainJob's pods join their group the way Trainer's pod-group plugins make them
(``TrainJobGangPlugin``): the group's label or annotation only, the scheduler is
the one the runtime's pod template names (upstream sets no ``schedulerName``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubetrain import naming, quantity
from kubetrain.api.objects import Obj
from kubetrain.controller.state import JobView
from kubetrain.kube.resources import (
    COSCHEDULING_POD_GROUPS,
    NATIVE_POD_GROUPS,
    VOLCANO_POD_GROUPS,
    Resource,
)


class GangScheduler:
    """One gang scheduler: the PodGroup it reads, when pods may be created, how a pod points at it."""

    name: str
    resource: ClassVar[Resource]
    # The scheduler's own gang scheduling: no CRD to install, and its PodGroup's spec is immutable
    # (a changed group is replaced, not patched).
    builtin: ClassVar[bool] = False

    def min_member(self, info: JobView) -> int:
        policy = info.run_policy.get("schedulingPolicy") or {}
        value = policy.get("minAvailable")
        return int(value) if value is not None else info.total_replicas

    def min_resources(self, info: JobView) -> dict[str, str]:
        policy = info.run_policy.get("schedulingPolicy") or {}
        if policy.get("minResources"):
            return {k: str(v) for k, v in policy["minResources"].items()}
        wanted = self.min_member(info)
        sums: dict[str, list[str | int | float]] = {}
        counted = 0
        for replica in info.replicas.values():
            for _ in range(replica.replicas):
                if counted >= wanted:
                    break
                counted += 1
                for container in replica.template.get("spec", {}).get("containers") or []:
                    resources = container.get("resources") or {}
                    for name, value in (resources.get("requests") or resources.get("limits") or {}).items():
                        sums.setdefault(name, []).append(str(value))
        return {name: quantity.total(values) for name, values in sorted(sums.items())}

    def spec(self, info: JobView, policy: Obj) -> Obj:
        """The scheduler's PodGroup spec for the job (``policy``: its ``schedulingPolicy``)."""
        raise NotImplementedError

    def pod_group(self, info: JobView) -> Obj:
        """The desired PodGroup of a job."""
        return {
            "apiVersion": self.resource.api_version,
            "kind": "PodGroup",
            "metadata": {
                "name": info.name,
                "namespace": info.namespace,
                "annotations": dict(info.annotations),
                "ownerReferences": [info.owner_reference()],
            },
            "spec": self.spec(info, info.run_policy.get("schedulingPolicy") or {}),
        }

    def admitted(self, pod_group: Obj | None) -> bool:
        """Whether pods may be created now."""
        return True

    def point_pod(self, info: JobView, rtype: str, pod: Obj) -> None:
        """Make ``pod`` one of the group's: the scheduler's name, unless the template names another."""
        spec = pod["spec"]
        current = spec.get("schedulerName")
        if current and current != self.name:
            info.warnings.append(
                f"{rtype} sets schedulerName {current!r}; gang scheduling with {self.name!r} is not applied to it"
            )
        else:
            spec["schedulerName"] = self.name
        self.mark(info, rtype, pod["metadata"])

    def mark(self, info: JobView, rtype: str, metadata: Obj) -> None:
        """The labels or annotations that tie a pod to the job's group."""

    def join(self, info: JobView, rtype: str, pod: Obj) -> None:
        """Make ``pod`` one of the group's as Trainer does for a TrainJob: the group's label or annotation,
        the scheduler left to the pod template."""
        self.mark(info, rtype, pod["metadata"])


class NativeGang(GangScheduler):
    name = "kubernetes"
    resource = NATIVE_POD_GROUPS
    builtin = True

    def spec(self, info: JobView, policy: Obj) -> Obj:
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": self.min_member(info)}}}
        if policy.get("priorityClass"):
            spec["priorityClassName"] = policy["priorityClass"]
        return spec

    def point_pod(self, info: JobView, rtype: str, pod: Obj) -> None:
        pod["spec"]["schedulingGroup"] = {"podGroupName": info.name}

    def join(self, info: JobView, rtype: str, pod: Obj) -> None:
        self.point_pod(info, rtype, pod)  # a pod is in a native group only through schedulingGroup


class Volcano(GangScheduler):
    name = "volcano"
    resource = VOLCANO_POD_GROUPS

    def spec(self, info: JobView, policy: Obj) -> Obj:
        spec: dict[str, Any] = {
            "minMember": self.min_member(info),
            "queue": policy.get("queue") or "default",
            "minResources": self.min_resources(info),
        }
        if policy.get("priorityClass"):
            spec["priorityClassName"] = policy["priorityClass"]
        if policy.get("networkTopology"):  # a TrainJob runtime's podGroupPolicy.volcano.networkTopology
            spec["networkTopology"] = dict(policy["networkTopology"])
        return spec

    def admitted(self, pod_group: Obj | None) -> bool:
        """Volcano waits until it has admitted the group."""
        phase = (pod_group or {}).get("status", {}).get("phase")
        return phase not in (None, "", "Pending")

    def mark(self, info: JobView, rtype: str, metadata: Obj) -> None:
        metadata.setdefault("annotations", {}).update(
            {naming.ANNOTATION_VOLCANO_GROUP: info.name, naming.ANNOTATION_VOLCANO_TASK: rtype.lower()}
        )

    def join(self, info: JobView, rtype: str, pod: Obj) -> None:
        pod["metadata"].setdefault("annotations", {})[naming.ANNOTATION_VOLCANO_GROUP] = info.name


class Coscheduling(GangScheduler):
    """scheduler-plugins' coscheduling, under the name its scheduler runs as."""

    resource = COSCHEDULING_POD_GROUPS

    def __init__(self, name: str) -> None:
        self.name = name

    def spec(self, info: JobView, policy: Obj) -> Obj:
        spec: dict[str, Any] = {"minMember": self.min_member(info), "minResources": self.min_resources(info)}
        if policy.get("scheduleTimeoutSeconds") is not None:
            spec["scheduleTimeoutSeconds"] = policy["scheduleTimeoutSeconds"]
        return spec

    def mark(self, info: JobView, rtype: str, metadata: Obj) -> None:
        metadata.setdefault("labels", {})[naming.LABEL_COSCHEDULING_POD_GROUP] = info.name


def gang_scheduler(name: str) -> GangScheduler:
    """The scheduler ``--gang-scheduler-name`` names: ``kubernetes``, ``volcano`` (any case), or else the
    name of a scheduler-plugins scheduler."""
    if name == NativeGang.name:
        return NativeGang()
    if name.lower() == Volcano.name:
        return Volcano()
    return Coscheduling(name)


def trainjob_gang(pod_group_policy: str | None, configured: GangScheduler | None) -> GangScheduler | None:
    """The gang scheduler of a runtime's ``podGroupPolicy``: Volcano, or coscheduling, which runs on the
    scheduler's native gang scheduling when the controller runs with ``--gang-scheduler-name=kubernetes``."""
    if pod_group_policy == "volcano":
        return Volcano()
    if pod_group_policy == "coscheduling":
        if configured is not None and configured.builtin:
            return configured
        return Coscheduling("scheduler-plugins-scheduler")  # a name only v1 pods are given (point_pod)
    return None


class GangPlugin:
    """Points every pod of a v1 job at the job's pod group, and at its scheduler."""

    name = "gang"

    def __init__(self, scheduler: GangScheduler) -> None:
        self.scheduler = scheduler

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        self.scheduler.point_pod(info, rtype, pod)


class TrainJobGangPlugin(GangPlugin):
    """Puts every pod of a TrainJob in its pod group; the runtime's pod template picks the scheduler."""

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        self.scheduler.join(info, rtype, pod)
