"""Gang scheduling: all of a job's pods are placed together, or none is.

Three schedulers are supported, chosen with ``--gang-scheduler-name``:

* ``kubernetes``: the scheduler's native gang scheduling (Kubernetes 1.36,
  ``scheduling.k8s.io/v1alpha2`` PodGroup with ``schedulingPolicy.gang.minCount``;
  pods point at it with ``spec.schedulingGroup``). No second scheduler to run.
* ``volcano``: a Volcano ``PodGroup`` and the ``volcano`` scheduler; pods are
  only created once Volcano has admitted the group (upstream's behaviour).
* any other name: the scheduler-plugins coscheduling ``PodGroup``, with that
  name as the pods' ``schedulerName`` (upstream's ``scheduler-plugins``).

``minMember``/``minCount`` is ``runPolicy.schedulingPolicy.minAvailable`` or every
replica of the job. The group is named after the job and owned by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubetrain import quantity
from kubetrain.controller.runtimes.framework import JobView, Obj
from kubetrain.kube.resources import (
    COSCHEDULING_POD_GROUPS,
    NATIVE_POD_GROUPS,
    VOLCANO_POD_GROUPS,
    Resource,
)

NATIVE = "kubernetes"
VOLCANO = "volcano"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"


@dataclass(frozen=True)
class GangScheduler:
    """One gang scheduler: which PodGroup to write and how to point pods at it."""

    name: str

    @property
    def native(self) -> bool:
        return self.name == NATIVE

    @property
    def volcano(self) -> bool:
        return self.name.lower() == VOLCANO

    @property
    def resource(self) -> Resource:
        if self.native:
            return NATIVE_POD_GROUPS
        return VOLCANO_POD_GROUPS if self.volcano else COSCHEDULING_POD_GROUPS

    @property
    def pod_scheduler_name(self) -> str | None:
        if self.native:
            return None
        return VOLCANO if self.volcano else self.name

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

    def pod_group(self, info: JobView) -> Obj:
        """The desired PodGroup of a job."""
        policy = info.run_policy.get("schedulingPolicy") or {}
        spec: dict[str, Any]
        if self.native:
            spec = {"schedulingPolicy": {"gang": {"minCount": self.min_member(info)}}}
            if policy.get("priorityClass"):
                spec["priorityClassName"] = policy["priorityClass"]
        elif self.volcano:
            spec = {
                "minMember": self.min_member(info),
                "queue": policy.get("queue") or "default",
                "minResources": self.min_resources(info),
            }
            if policy.get("priorityClass"):
                spec["priorityClassName"] = policy["priorityClass"]
        else:
            spec = {"minMember": self.min_member(info), "minResources": self.min_resources(info)}
            if policy.get("scheduleTimeoutSeconds") is not None:
                spec["scheduleTimeoutSeconds"] = policy["scheduleTimeoutSeconds"]
        return {
            "apiVersion": self.resource.api_version,
            "kind": "PodGroup",
            "metadata": {
                "name": info.name,
                "namespace": info.namespace,
                "annotations": dict(info.annotations),
                "ownerReferences": [info.owner_reference()],
            },
            "spec": spec,
        }

    def admitted(self, pod_group: Obj | None) -> bool:
        """Whether pods may be created: Volcano waits until it has admitted the group."""
        if not self.volcano:
            return True
        phase = (pod_group or {}).get("status", {}).get("phase")
        return phase not in (None, "", "Pending")


class GangPlugin:
    """Points every pod at the job's pod group."""

    name = "gang"

    def __init__(self, scheduler: GangScheduler) -> None:
        self.scheduler = scheduler

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        spec = pod["spec"]
        if self.scheduler.native:
            spec["schedulingGroup"] = {"podGroupName": info.name}
            return
        wanted = self.scheduler.pod_scheduler_name
        current = spec.get("schedulerName")
        if current and current != wanted:
            info.warnings.append(
                f"{rtype} sets schedulerName {current!r}; gang scheduling with {wanted!r} is not "
                "applied to it"
            )
        else:
            spec["schedulerName"] = wanted
        metadata = pod["metadata"]
        if self.scheduler.volcano:
            metadata.setdefault("annotations", {}).update(
                {VOLCANO_GROUP_ANNOTATION: info.name, VOLCANO_TASK_ANNOTATION: rtype.lower()}
            )
        else:
            metadata.setdefault("labels", {})[COSCHEDULING_LABEL] = info.name
