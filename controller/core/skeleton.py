"""What every kind's reconciler shares: the prelude of a pass, the status writer, lifetimes, reports.

``JobReconciler`` is the skeleton the v1 reconciler (``v1.reconciler``) and the
TrainJob reconciler (``trainjob``) fill in. A pass starts the same for both
(``reconcile``): a job gone from the cache forgets its expectations; a job
another controller manages, or one being deleted, is left alone; a job whose
expected creates and deletes have not reached the cache yet waits for them.
Then ``reconcile_job`` decides and writes. The writes they share are here too:
the status, as a merge patch guarded by the resourceVersion the pass read;
the ending of a job that finishes (``finish``: its terminal status is written
before anything is cleaned up, for every kind); the deletion of a job whose TTL
has passed. Times are RFC 3339 strings with one-second resolution, as the API
server keeps them.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NotRequired, Protocol, TypedDict, TypeVar, Unpack

from kubetrain import naming
from kubetrain.api.objects import JobIdentity, Obj
from kubetrain.controller import metrics
from kubetrain.controller.core import conditions as cond
from kubetrain.controller.core import handlers
from kubetrain.controller.core.departed import DepartedPods
from kubetrain.controller.core.writes import ChildRejectedError, ChildWriter, Rejections
from kubetrain.controller.plugins.gang import GangScheduler
from kubetrain.controller.plugins.gpu import gpus_requested
from kubetrain.controller.plugins.status_server import StatusServerPlugin
from kubetrain.controller.state import PodPlugin
from kubetrain.kube.client import KubeClient
from kubetrain.kube.events import NORMAL, WARNING, EventRecorder
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.informer import Handler, Informer
from kubetrain.kube.patch import merge_patch
from kubetrain.kube.resources import Resource
from kubetrain.kube.runner import Result, RetryLaterError

log = logging.getLogger("kubetrain.controller")

OWNER_INDEX = "owner"  # the informer index of children by their controller's uid
COUNTERS = {  # what the decisions of every kind count, by name
    "created": metrics.jobs_created,
    "restarted": metrics.jobs_restarted,
    "disrupted": metrics.jobs_disrupted,
    "successful": metrics.jobs_successful,
    "failed": metrics.jobs_failed,
}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def seconds_left(since: dt.datetime | None, seconds: int | str | None, now: dt.datetime) -> float | None:
    """Seconds until ``seconds`` after ``since`` (0 once past), or None when either is unknown:
    the time to look again at a deadline or a TTL."""
    if since is None or seconds is None:
        return None
    return max(0.0, (since - now).total_seconds() + int(seconds))


def gpu_seconds(pods: Iterable[Obj], until: dt.datetime) -> int:
    """GPU-seconds the pods had run by ``until``: each started pod's GPUs times the seconds since its
    ``startTime``. What a disruption cut short: the runs it stopped (the disrupted pods and the peers
    stopped with them), whose work since their last checkpoint is done again."""
    total = 0.0
    for pod in pods:
        since = parse_time((pod.get("status") or {}).get("startTime"))
        if since is not None:
            total += gpus_requested(pod) * max((until - since).total_seconds(), 0.0)
    return round(total)


@dataclass
class Settings:
    """How the controller behaves, from its flags."""

    managed_by: frozenset[str | None] = frozenset(
        {None, "", naming.MANAGED_BY_TRAINING_OPERATOR, naming.MANAGED_BY_KUBETRAIN}
    )
    gang: GangScheduler | None = None
    extra_plugins: Mapping[str, Sequence[PodPlugin]] = field(default_factory=dict)  # by kind
    create_concurrency: int = 64
    status_server: StatusServerPlugin | None = None  # progress reports (docs/observability.md)


@dataclass
class Pass(JobIdentity):
    """One reconcile of one job: a private copy of the job, its status as being edited, and the status
    last written (the baseline the next write is a patch against)."""

    status: Obj
    original: Obj
    now: dt.datetime

    @property
    def stamp(self) -> str:
        return rfc3339(self.now)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Ending(Protocol):
    """How a job finishes in a pass (a kind's decision says it)."""

    @property
    def succeeded(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    @property
    def message(self) -> str: ...


class Decided(Protocol):
    """What a kind's decision of a pass holds that the shared writes read."""

    status: Obj  # the status to write
    requeue_after: float | None


DecisionT = TypeVar("DecisionT", bound=Decided)


class Shared(TypedDict):
    """What every kind's reconciler is made with (``clock`` for tests)."""

    kube: KubeClient
    jobs: Informer
    pods: Informer
    services: Informer
    expectations: Expectations
    recorder: EventRecorder
    settings: Settings
    clock: NotRequired[Callable[[], dt.datetime]]


class JobReconciler:
    """The skeleton of a job kind's reconciler; a kind fills in ``manages`` and ``reconcile_job``."""

    resource: Resource
    name: str
    conditions: cond.Conditions
    # Children besides pods whose creates raise the job's expectations and whose events settle them: the
    # one fact both sides read, since an event settling a create nobody expected would settle a pod's.
    tracked_children: frozenset[Resource] = frozenset()
    # How the log says a job finished: "job ns/x succeeded: ..." (a kind may name it and its success).
    finish_words: tuple[str, str] = ("job", "succeeded")

    def __init__(self, **shared: Unpack[Shared]) -> None:
        self.kube = shared["kube"]
        self.jobs = shared["jobs"]
        self.pods = shared["pods"]
        self.services = shared["services"]
        self.expectations = shared["expectations"]
        self.recorder = shared["recorder"]
        self.settings = shared["settings"]
        self.clock = shared.get("clock", _now)
        self.writer = ChildWriter(
            self.kube, self.expectations, self.recorder, self.settings.create_concurrency
        )
        self.rejections = Rejections()
        self.departed = DepartedPods()

    # -- event handlers ------------------------------------------------------------------------------
    def pod_handler(self, enqueue: Callable[[str], None]) -> Handler:
        """Pods: settle the pod expectations, keep the reports of deleted ones, enqueue the owning job."""
        return handlers.child_handler(self.resource, enqueue, self.expectations, self.departed)

    def child_handler(self, enqueue: Callable[[str], None], resource: Resource) -> Handler:
        """Other children of ``resource``: enqueue the owning job; settle the job's expectations only
        for a kind whose creates the reconciler tracks (``tracked_children``), or an untracked create's
        event would settle one the pods are owed."""
        tracked = resource in self.tracked_children
        return handlers.child_handler(self.resource, enqueue, self.expectations if tracked else None)

    def job_handler(self, enqueue: Callable[[str], None]) -> Handler:
        return handlers.job_handler(enqueue, self.expectations, on_delete=self.forget)

    def forget(self, key: str) -> None:
        """A job is gone: drop what is kept about it."""
        self.rejections.forget(key)
        self.departed.forget(key)

    # -- a pass ----------------------------------------------------------------------------------------
    def manages(self, job: Obj) -> bool:
        raise NotImplementedError

    async def reconcile_job(self, key: str, cached: Obj) -> Result:
        raise NotImplementedError

    async def reconcile(self, key: str) -> Result:
        cached = self.jobs.get(key)
        if cached is None:
            self.expectations.forget(key)
            return Result()
        if not self.manages(cached) or cached["metadata"].get("deletionTimestamp"):
            return Result()
        if not self.expectations.satisfied(key):
            wait = self.expectations.pending_for(key) + 0.5
            held = await self.write_held(key, cached)
            return Result(requeue_after=wait if held is None else min(wait, held))
        return await self.reconcile_job(key, cached)

    async def write_held(self, key: str, cached: Obj) -> float | None:
        """While a pass waits for its creates to be seen: write a status held back once its time is up;
        the seconds until then, or None when nothing is held. A kind that holds nothing back has
        nothing to write."""
        return None

    # -- writes ----------------------------------------------------------------------------------------
    async def write_status(self, ctx: Pass) -> None:
        """Merge-patch the status, guarded by the job's resourceVersion, when this pass changed it.

        The written version becomes the pass's baseline, so a later write of the same pass sends
        only what changed since, under the new resourceVersion."""
        if ctx.status == ctx.original:
            return
        meta = ctx.job["metadata"]
        body = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": merge_patch(ctx.original, ctx.status),
        }
        updated = await self.kube.patch(
            self.resource, meta["name"], body, namespace=meta["namespace"], subresource="status"
        )
        self.jobs.observe_write(updated)
        ctx.job["metadata"] = updated["metadata"]
        ctx.original = copy.deepcopy(ctx.status)
        self.wrote_status(ctx)
        log.info("%s %s status: %s", self.name, ctx.key, cond.state(ctx.status) or "-")

    def wrote_status(self, ctx: Pass) -> None:
        """Called after each status write (the v1 reconciler times its coalescing from it)."""

    async def copy_report(self, ctx: Pass, report: Obj | None, departed: list[Obj]) -> None:
        """Copy rank 0's report into the job; the pods deleted since the last pass that left one
        (``DepartedPods``, the ``departed`` the report was looked for in) are kept again if it fails."""
        try:
            await self.writer.copy_report(self.resource, self.jobs, ctx.job, report)
        except BaseException:
            self.departed.restore(ctx.key, departed)
            raise

    def count(self, namespace: str, counter: str, framework: str, n: int = 1) -> None:
        """Count ``n`` of a job's ``counter`` (``COUNTERS``) under its namespace and ``framework`` label."""
        COUNTERS[counter].labels(namespace, framework).inc(n)

    async def finish(
        self, ctx: Pass, ending: Ending, framework: str, clean_up: Callable[[], Awaitable[None]]
    ) -> None:
        """Carry out a job finishing in this pass: write its terminal status, then count and announce the
        ending, then ``clean_up``. A failed write leaves every pod in place, so a 409 or a crash in
        between leaves a finished job, never one whose pods were deleted but which still looks
        unfinished (the next pass would recreate them)."""
        await self.write_status(ctx)
        self.count(ctx.namespace, "successful" if ending.succeeded else "failed", framework)
        self.recorder.event(ctx.job, NORMAL if ending.succeeded else WARNING, ending.reason, ending.message)
        noun, success = self.finish_words
        log.info("%s %s %s: %s", noun, ctx.key, success if ending.succeeded else "failed", ending.message)
        await clean_up()

    async def reject(
        self,
        ctx: Pass,
        rejected: ChildRejectedError,
        decide: Callable[[bool], DecisionT],
        finish: Callable[[Pass, DecisionT], Awaitable[None]],
    ) -> Result:
        """A child the API server will not take: fail the job, or say why while trying again.

        ``decide(fails_job)`` is the kind's decision on it, from the status written so far in the pass
        (``ctx.status``); a job that fails is finished by ``finish``, terminal status first."""
        fails = self.rejections.fails_job(ctx.key, rejected)
        after = decide(fails)
        if fails:
            ctx.status = after.status
            await finish(ctx, after)
            return Result(after.requeue_after)
        if rejected.fail_after is None and after.status != ctx.status:
            ctx.status = after.status
            await self.write_status(ctx)
        raise RetryLaterError(str(rejected))

    async def delete_expired(self, ctx: Pass, framework: str, message: str) -> None:
        """Delete a finished job whose TTL has passed (its children go with it, by owner reference)."""
        meta = ctx.job["metadata"]
        if await self.kube.delete(self.resource, meta["name"], meta["namespace"], uid=meta["uid"]):
            metrics.jobs_deleted.labels(ctx.namespace, framework).inc()
            self.recorder.event(ctx.job, NORMAL, "SuccessfulDeleteJob", message)
            log.info("%s %s deleted: its TTL after finishing passed", self.name, ctx.key)
