"""Kubernetes objects as the controller and the libraries above the API models read them: plain dicts
(``Obj``), and a job read the way its children need it (``JobIdentity``, ``Replica``).

Why here, in the API layer: the TrainJob resolution (``kubetrain.trainjob``), which the controller, the
Airflow operators and the CLI share, builds on them, so they cannot live in the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
