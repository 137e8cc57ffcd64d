"""The build state every plugin reads, and the one interface of a pod plugin.

The Kubeflow Trainer v2 plugin idea, in Python: one build-state object per
reconcile (a v1 job's ``frameworks.base.JobInfo``, a TrainJob's
``kubetrain.trainjob.state.TrainJobInfo``), read by plugins that each do one thing and
never call each other. ``JobView`` is what both kinds of build state offer;
a ``PodPlugin`` (checkpoint env, GPU tolerations, gang scheduling, the
master-wait init container) decorates every pod of either kind through it.
"""

from __future__ import annotations

from typing import Protocol

from kubetrain.api.objects import Obj, Replica


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
