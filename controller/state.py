"""The build state every plugin reads, and the one interface of a pod plugin.

The Kubeflow Trainer v2 plugin idea, in Python: one build-state object per
reconcile (a v1 job's ``frameworks.base.JobInfo``, a TrainJob's
``trainer.state.TrainJobInfo``), read by plugins that each do one thing and
never call each other. ``JobView`` is what both kinds of build state offer;
a ``PodPlugin`` (checkpoint env, GPU tolerations, gang scheduling, the
master-wait init container) decorates every pod of either kind through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]
EnvVar = dict[str, Any]


def section(obj: Obj, key: str) -> Obj:
    """The object under ``key``: ``{}`` where it is absent or null, as the API server treats both."""
    found: Obj = obj.get(key) or {}
    return found


@dataclass
class Replica:
    """One replica type of a job (a replicated job of a TrainJob), with defaults applied.

    ``template`` is the job's own pod template, shared with the cache: read it, never change it;
    the build state hands out a private, defaulted copy for building a pod.
    """

    rtype: str
    replicas: int
    restart_policy: str
    template: Obj


@dataclass
class JobIdentity:
    """A job object, read the way its children need it: names, spec, annotations, owner reference.

    The base of the build state of every kind.
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
        return section(self.job, "spec")

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


class JobView(Protocol):
    """What the pod plugins read of a job: a v1 ``JobInfo`` or a TrainJob's build state alike."""

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


class PodPlugin(Protocol):
    """One thing done to every pod the controller builds, for any kind."""

    name: str

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None: ...
