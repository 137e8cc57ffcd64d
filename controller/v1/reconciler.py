"""Reconcile a Kubeflow v1 job (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob) into pods.

Written once for every v1 kind; the ``Framework`` supplies what differs. A pass
reads the job and its pods and services from the informer caches (the reads
that go to the API server are a child found under its name after a 409, and an
elastic job's autoscaler), lets ``v1.decisions.decide`` decide, and carries the
``Decision`` out in the order docs/reliability.md documents:

* a job that finishes in this pass: its terminal status is written first, then
  it is cleaned up, so a 409 or a crash in between leaves a finished job, never
  one whose pods were deleted but which still looks unfinished (the next pass
  would recreate them);
* a running job: the status (restarts counted, conditions) is written before
  anything is deleted, so a conflict changes nothing; the missing children are
  created in slow-start batches alongside it; then the pods to restart go. A
  status that only says the job progressed (``status_hold``) is held back up to
  a second and the passes meanwhile go on from it, so a job starting costs one
  write, not one per pod event;
* a child the API server refuses for good (its name taken by another owner, or
  a pod template it rejects as invalid pass after pass) fails the job with the
  API server's message instead of retrying forever;
* a suspended job loses its pods, services, pod group and autoscaler before its
  status says so; a finished one is cleaned up, and deleted once its TTL has
  passed. Timed requeues make TTLs and deadlines happen on time.

Decisions are documented for users in docs/job-lifecycle.md.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from dataclasses import dataclass
from typing import Unpack

from kubetrain.api.objects import Obj
from kubetrain.controller.core import conditions as cond
from kubetrain.controller.core.skeleton import OWNER_INDEX, JobReconciler, Pass, Shared
from kubetrain.controller.core.tls_config import sync_tls_config
from kubetrain.controller.core.writes import (
    ChildRejectedError,
    check_existing,
    raise_first_failure,
    require_ours,
)
from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.plugins.gang import GangPlugin
from kubetrain.controller.plugins.gpu import GpuPlugin
from kubetrain.controller.plugins.logtail import LogTailPlugin
from kubetrain.controller.state import PodPlugin
from kubetrain.controller.v1.decisions import (
    Counter,
    Decision,
    Observed,
    Phase,
    Setup,
    decide,
    on_rejection,
    status_hold,
)
from kubetrain.controller.v1.frameworks.base import Framework
from kubetrain.kube import errors
from kubetrain.kube.events import NORMAL, WARNING
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import HPAS, PODS, SERVICES
from kubetrain.kube.runner import Result

log = logging.getLogger("kubetrain.controller")


@dataclass(frozen=True)
class Held:
    """A status write held back: since when (monotonic), from which status on record, and what it writes."""

    since: float
    original: Obj
    status: Obj


COALESCE_SECONDS = 1.0  # how long a status write of progress only waits for more changes
POD_GROUP_RETRY = 5.0  # seconds between looks at a pod group the scheduler has not admitted yet


class V1JobReconciler(JobReconciler):
    conditions = cond.V1
    # A pass before the watch shows the services of the last one would create them again (a 409 and a
    # GET each: one job in ten of a burst of 50 did, before services were tracked).
    tracked_children = frozenset({SERVICES})

    def __init__(
        self, *, framework: Framework, pod_groups: Informer | None = None, **shared: Unpack[Shared]
    ) -> None:
        super().__init__(**shared)
        settings = self.settings
        self.framework = framework
        self.resource = framework.api.resource
        self.name = framework.api.singular
        self.pod_groups = pod_groups
        plugins: list[PodPlugin] = [CheckpointPlugin(), GpuPlugin(), LogTailPlugin()]
        if settings.gang is not None:
            plugins.append(GangPlugin(settings.gang))
        if settings.status_server is not None:
            plugins.append(settings.status_server)
        self.setup = Setup(
            framework, (*plugins, *settings.extra_plugins.get(framework.api.kind, ())), settings.gang
        )
        self._held: dict[str, Held] = {}  # status writes held back (``status_hold``)

    def forget(self, key: str) -> None:
        super().forget(key)
        self._held.pop(key, None)

    def manages(self, job: Obj) -> bool:
        managed_by = (job.get("spec") or {}).get("runPolicy", {}).get("managedBy")
        return managed_by in self.settings.managed_by

    # -- a pass ----------------------------------------------------------------------------------------
    async def reconcile_job(self, key: str, cached: Obj) -> Result:
        uid = cached["metadata"]["uid"]
        departed = self.departed.take(key)
        observed = Observed(
            self.pods.by_index(OWNER_INDEX, uid), self.services.by_index(OWNER_INDEX, uid), departed
        )
        try:
            d = decide(self._with_held(key, cached), observed, self.clock(), self.setup)
        except BaseException:
            self.departed.restore(key, departed)
            raise
        ctx = Pass(d.info.job, d.status, copy.deepcopy(cached.get("status") or {}), d.now)
        self._record(ctx, d)
        if d.copies_report:
            await self.copy_report(ctx, d.report, departed)
        else:
            self.departed.restore(key, departed)
        if d.phase is Phase.FINISHED:
            return await self._finished(ctx, d)
        if d.phase is Phase.SUSPENDED:
            await self._cleanup(ctx, d)
            await self._sync_autoscaler(ctx, d)
            await self.write_status(ctx)
            result = Result()
        else:
            try:
                result = await self._active(ctx, d)
            except ChildRejectedError as rejected:
                return await self._rejected(ctx, d, rejected)
        self.rejections.forget(key)
        return result

    async def _finished(self, ctx: Pass, d: Decision) -> Result:
        await self._cleanup(ctx, d)
        result = Result(d.requeue_after)
        if d.delete_job:
            await self.delete_expired(
                ctx, self.framework.api.framework_label, f"Deleted job: {ctx.name} (TTL)"
            )
            result = Result()
        await self.write_status(ctx)
        return result

    async def _active(self, ctx: Pass, d: Decision) -> Result:
        if d.phase is Phase.FINISHING:
            await self._finish(ctx, d)
            return Result(d.requeue_after)
        if d.pod_group is not None and not await self._sync_pod_group(ctx, d):
            ctx.status = d.waiting_for_pod_group()
            await self.write_status(ctx)
            return Result(requeue_after=POD_GROUP_RETRY)
        # Creating is safe before the status is written (and a round trip sooner); deleting waits for
        # the status, so a restart is on record before its pod goes. Every write of the gather ends
        # before the first failure is raised, so the status a rejection writes next is current.
        if d.create_pods and self.settings.status_server is not None:
            await sync_tls_config(self.kube, ctx.job, self.settings.status_server)
        deferred = self._coalesce(ctx)
        raise_first_failure(await self._create_and_write(ctx, d, deferred))
        created = d.after_creates()
        if created != ctx.status:
            ctx.status = created
            await self.write_status(ctx)
        await self.writer.delete_all(ctx.job, PODS, d.delete_pods)
        await self.writer.delete_all(ctx.job, PODS, d.delete_pods_last)
        await self.writer.delete_all(ctx.job, SERVICES, d.delete_services)
        deleted = len(d.delete_pods) + len(d.delete_pods_last)
        if d.create_pods or deleted:
            log.info(
                "job %s: created %d pods and %d services, deleted %d pods",
                ctx.key,
                len(d.create_pods),
                len(d.create_services),
                deleted,
            )
        for warning in dict.fromkeys(d.info.warnings):
            self.recorder.event(ctx.job, WARNING, "PodTemplateOverridden", warning)
        await self._sync_autoscaler(ctx, d)
        return Result.soonest(Result(d.requeue_after), Result(deferred))

    async def _create_and_write(self, ctx: Pass, d: Decision, deferred: float | None) -> list[object]:
        """Create the missing children alongside the status write, and return every outcome once all
        have ended. A held write (``deferred`` seconds) is left to a later pass, unless the creates are
        still going when its time is up (a budget, a quota, thousands of replicas): then it is written
        then, so a job is never without a status for as long as its pods take to create."""
        creates = asyncio.gather(
            self.writer.create_all(
                ctx.job, SERVICES, d.create_services, track=SERVICES in self.tracked_children
            ),
            self.writer.create_all(ctx.job, PODS, d.create_pods, track=True),
            return_exceptions=True,
        )
        try:
            if deferred is not None:
                done, _ = await asyncio.wait({creates}, timeout=deferred)
                if done:
                    return list(creates.result())
            created, written = await asyncio.gather(creates, self.write_status(ctx), return_exceptions=True)
        except BaseException:
            creates.cancel()
            raise
        return [*created, written] if isinstance(created, list) else [created, written]

    async def _finish(self, ctx: Pass, d: Decision) -> None:
        """Write the terminal status, then clean up (``JobReconciler.finish``)."""
        assert d.finish is not None
        await self.finish(ctx, d.finish, self.framework.api.framework_label, lambda: self._cleanup(ctx, d))

    async def _rejected(self, ctx: Pass, d: Decision, rejected: ChildRejectedError) -> Result:
        """A child the API server will not take: fail the job, or say why while trying again."""

        def decided(fails: bool) -> Decision:
            return on_rejection(
                d, ctx.status, rejected.reason, str(rejected), fails_job=fails, setup=self.setup
            )

        return await self.reject(ctx, rejected, decided, self._finish)

    # -- the writes of a decision ----------------------------------------------------------------------
    def _record(self, ctx: Pass, d: Decision) -> None:
        for event in d.events:
            self.recorder.event(ctx.job, event.type, event.reason, event.message)
        for counter, n in d.counters:
            self._count(ctx, counter, n)

    def _count(self, ctx: Pass, counter: Counter, n: int = 1) -> None:
        self.count(ctx.namespace, counter, self.framework.api.framework_label, n)

    async def _cleanup(self, ctx: Pass, d: Decision) -> None:
        """Delete what the decision cleans up: pods and services at once, then the pod group."""
        outcomes = await asyncio.gather(
            self.writer.delete_all(ctx.job, PODS, d.cleanup_pods),
            self.writer.delete_all(ctx.job, SERVICES, d.cleanup_services),
            return_exceptions=True,
        )
        raise_first_failure(outcomes)
        if d.delete_pod_group and self.settings.gang is not None:
            cached = self.pod_groups.get(ctx.key) if self.pod_groups else None
            if await self.writer.delete_owned(ctx.job, self.settings.gang.resource, cached):
                self.recorder.event(
                    ctx.job, NORMAL, "SuccessfulDeletePodGroup", f"Deleted PodGroup: {ctx.name}"
                )

    def _hold_of(self, key: str, cached: Obj) -> Held | None:
        """The job's held-back write, if the status on record is still the one it began from; a status
        someone else wrote since wins, and the hold is dropped."""
        held = self._held.get(key)
        if held is not None and (cached.get("status") or {}) != held.original:
            del self._held[key]
            return None
        return held

    def _with_held(self, key: str, cached: Obj) -> Obj:
        """The cached job, with the status a held-back write would have written: a pass goes on from
        what the last pass decided, so ``Created`` (its Event and counter) and the stamps of a held
        condition are decided once."""
        held = self._hold_of(key, cached)
        return cached if held is None else {**cached, "status": held.status}

    def _coalesce(self, ctx: Pass) -> float | None:
        """Seconds to hold back this pass's status write (``status_hold``); None to write it now."""
        now = time.monotonic()
        held = self._held.get(ctx.key)
        since = None if held is None else held.since
        wait = status_hold(ctx.original, ctx.status, since, now, COALESCE_SECONDS)
        if wait is not None:
            self._held[ctx.key] = Held(now if since is None else since, ctx.original, ctx.status)
        elif ctx.status == ctx.original:
            self._held.pop(ctx.key, None)  # nothing left to write; else a write succeeding drops it
        return wait

    def wrote_status(self, ctx: Pass) -> None:
        self._held.pop(ctx.key, None)

    async def write_held(self, key: str, cached: Obj) -> float | None:
        """A job whose pods take long to create (a budget, a quota, thousands of replicas) waits for their
        events before its next pass; what its passes held back is written when the hold is over all the
        same, so it says ``Created`` (and how far it got) while its pods are still being created."""
        held = self._hold_of(key, cached)
        if held is None:
            return None
        left = status_hold(held.original, held.status, held.since, time.monotonic(), COALESCE_SECONDS)
        if left is None:
            job = {**cached, "metadata": copy.deepcopy(cached["metadata"])}
            await self.write_status(Pass(job, held.status, held.original, self.clock()))
        return left

    async def _sync_pod_group(self, ctx: Pass, d: Decision) -> bool:
        """Make the job's pod group match the decision's; returns whether pods may be created now.

        The native PodGroup's spec is immutable, so a changed size replaces it, and only while the job
        has no pods (a suspend and resume gets there); the other schedulers' groups are patched.
        """
        gang, desired = self.settings.gang, d.pod_group
        assert gang is not None and desired is not None
        existing = self.pod_groups.get(ctx.key) if self.pod_groups else None
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            return False  # the old group is still going away; its deletion event requeues the job
        if existing is not None:
            require_ours(ctx.job, gang.resource, existing)
        if existing is None:
            try:
                existing = await self.kube.create(gang.resource, desired, ctx.namespace)
                self.recorder.event(
                    ctx.job, NORMAL, "SuccessfulCreatePodGroup", f"Created PodGroup: {ctx.name}"
                )
            except errors.APIConflictError:
                existing = await check_existing(self.kube, ctx.job, gang.resource, ctx.name)
        elif existing.get("spec") != desired["spec"] and any(
            k not in existing.get("spec", {}) or existing["spec"][k] != v for k, v in desired["spec"].items()
        ):
            if gang.builtin:
                if not d.pods:
                    await self.writer.delete_owned(ctx.job, gang.resource, existing)
                    return False
            else:
                await self.kube.patch(
                    gang.resource, ctx.name, {"spec": desired["spec"]}, namespace=ctx.namespace
                )
        return existing is not None and gang.admitted(existing)

    async def _sync_autoscaler(self, ctx: Pass, d: Decision) -> None:
        """Make an elastic job's HorizontalPodAutoscaler what the decision wants (or delete it)."""
        if d.autoscaler is None and not d.delete_autoscaler:
            return
        current = await self.kube.get(HPAS, ctx.name, ctx.namespace)
        if current is not None:
            require_ours(ctx.job, HPAS, current)
        if d.autoscaler is None:
            await self.writer.delete_owned(ctx.job, HPAS, current)
        elif current is None:
            try:
                await self.kube.create(HPAS, d.autoscaler, ctx.namespace)
            except errors.APIConflictError:
                await check_existing(self.kube, ctx.job, HPAS, ctx.name)
        elif current.get("spec") != d.autoscaler["spec"]:
            await self.kube.patch(HPAS, ctx.name, {"spec": d.autoscaler["spec"]}, namespace=ctx.namespace)
