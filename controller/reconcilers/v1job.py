"""Reconcile a Kubeflow v1 job (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob) into pods.

Written once for every v1 kind; the ``Framework`` supplies what differs. One
pass, level-triggered, reading the informer caches (the only reads that go to
the API server are a child found under its name after a 409, and an elastic
job's autoscaler):

1. skip jobs another controller manages, jobs being deleted, and jobs whose
   expected creates/deletes have not reached the cache yet;
2. a finished job: clean up (``cleanup_targets``), delete it once its TTL has
   passed (a timed requeue makes that happen on time);
3. a suspended job: delete its pods and services; a resumed one restarts its clock;
4. otherwise observe the pods, count restarts (once per pod, ``restarts``), and
   decide, in this order: backoff limit exceeded, deadline exceeded, a replica
   failed for good, the job succeeded, it is restarting, it is running;
5. a job that finishes: write the terminal status first, then clean up, so a
   409 or a crash in between leaves a finished job, never one whose pods were
   deleted but which still looks unfinished (the next pass would recreate them);
6. otherwise write the status (before anything destructive, so a conflict
   changes nothing), create what is missing in slow-start batches, then delete
   the pods to restart;
7. a child the API server refuses for good (its name taken by another owner,
   or a pod template it rejects as invalid pass after pass) fails the job with
   the API server's message instead of retrying forever;
8. requeue at the next deadline.

Decisions are documented for users in docs/job-lifecycle.md.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming
from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.controller import metrics
from kubetrain.controller.reconcilers import conditions as cond
from kubetrain.controller.reconcilers import handlers, restarts
from kubetrain.controller.reconcilers.children import build_pod, build_service, replica_of
from kubetrain.controller.reconcilers.departed import DepartedPods
from kubetrain.controller.reconcilers.observe import Observation, fenced_failure, observe, rank0_report
from kubetrain.controller.reconcilers.writes import (
    ChildRejectedError,
    ChildWriter,
    Rejections,
    check_existing,
    raise_first_failure,
    require_ours,
)
from kubetrain.controller.runtimes.checkpoint import CheckpointPlugin
from kubetrain.controller.runtimes.framework import (
    Framework,
    JobInfo,
    Obj,
    PodPlugin,
    job_info,
    replica_labels,
)
from kubetrain.controller.runtimes.gang import GangPlugin, GangScheduler
from kubetrain.controller.runtimes.gpu import GpuPlugin, lopsided_gpu_warning
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.events import NORMAL, WARNING, EventRecorder
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.informer import Handler, Informer
from kubetrain.kube.patch import merge_patch
from kubetrain.kube.resources import HPAS, PODS, SERVICES
from kubetrain.kube.runner import Result, RetryLaterError

log = logging.getLogger("kubetrain.controller")

OWNER_INDEX = "owner"
COALESCE_SECONDS = 1.0  # replica-count-only status writes of one job are at most this frequent


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class Settings:
    """How the controller behaves, from its flags."""

    managed_by: frozenset[str | None] = frozenset(
        {None, "", naming.MANAGED_BY_TRAINING_OPERATOR, naming.MANAGED_BY_KUBETRAIN}
    )
    gang: GangScheduler | None = None
    extra_plugins: Sequence[PodPlugin] = ()
    create_concurrency: int = 64


@dataclass
class _Work:
    """What one reconcile decided to do after its status is written."""

    delete_pods: list[Obj] = field(default_factory=list)
    delete_services: list[Obj] = field(default_factory=list)
    create_pods: list[Obj] = field(default_factory=list)
    create_services: list[Obj] = field(default_factory=list)


@dataclass
class _Pass:
    """The state of one reconcile: the job (a private copy), its status being edited, its children."""

    info: JobInfo
    status: dict[str, Any]
    original: dict[str, Any]
    pods: list[Obj]
    services: list[Obj]
    now: dt.datetime
    stamp: str


class V1JobReconciler:
    def __init__(
        self,
        *,
        kube: KubeClient,
        framework: Framework,
        jobs: Informer,
        pods: Informer,
        services: Informer,
        expectations: Expectations,
        recorder: EventRecorder,
        settings: Settings,
        pod_groups: Informer | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.kube = kube
        self.framework = framework
        self.jobs = jobs
        self.pods = pods
        self.services = services
        self.pod_groups = pod_groups
        self.expectations = expectations
        self.recorder = recorder
        self.settings = settings
        self.clock = clock
        plugins: list[PodPlugin] = [CheckpointPlugin(), GpuPlugin()]
        if settings.gang is not None:
            plugins.append(GangPlugin(settings.gang))
        self.plugins: list[PodPlugin] = [*plugins, *settings.extra_plugins]
        self.name = framework.api.kind.lower()
        self.writer = ChildWriter(kube, expectations, recorder, settings.create_concurrency)
        self._last_write: dict[str, float] = {}
        self.rejections = Rejections()
        self.departed = DepartedPods()

    # -- event handlers ------------------------------------------------------------------------------
    def pod_handler(self, enqueue: Callable[[str], None]) -> Handler:
        """Pods: settle the pod expectations, enqueue the owning job."""
        return handlers.child_handler(self.framework.api.resource, enqueue, self.expectations, self.departed)

    def child_handler(self, enqueue: Callable[[str], None]) -> Handler:
        """Services and pod groups: enqueue the owning job (their creates are not tracked, so their
        events must not settle the pods' expectations)."""
        return handlers.child_handler(self.framework.api.resource, enqueue)

    def job_handler(self, enqueue: Callable[[str], None]) -> Handler:
        return handlers.job_handler(enqueue, self.expectations, on_delete=self._forget)

    def _forget(self, key: str) -> None:
        self._last_write.pop(key, None)
        self.rejections.forget(key)
        self.departed.forget(key)

    # -- reconcile -------------------------------------------------------------------------------------
    def manages(self, job: Obj) -> bool:
        managed_by = (job.get("spec") or {}).get("runPolicy", {}).get("managedBy")
        return managed_by in self.settings.managed_by

    async def reconcile(self, key: str) -> Result:
        cached = self.jobs.get(key)
        if cached is None:
            self.expectations.forget(key)
            return Result()
        if not self.manages(cached) or cached["metadata"].get("deletionTimestamp"):
            return Result()
        if not self.expectations.satisfied(key):
            return Result(requeue_after=self.expectations.pending_for(key) + 0.5)
        # The cache's objects are shared: this pass gets its own metadata, spec and status to change
        # (templates stay shared and are copied only to build a pod).
        job = {
            **cached,
            "metadata": copy.deepcopy(cached["metadata"]),
            "spec": dict(cached.get("spec") or {}),
        }
        info = job_info(job, self.framework)
        status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        now = self.clock()
        ctx = _Pass(
            info=info,
            status=status,
            original=copy.deepcopy(status),
            pods=[p for p in self.pods.by_index(OWNER_INDEX, info.uid) if replica_of(p) is not None],
            services=self.services.by_index(OWNER_INDEX, info.uid),
            now=now,
            stamp=rfc3339(now),
        )
        self._ensure_created(ctx)
        if cond.is_finished(status):
            result = await self._finished(ctx)
            await self._write_status(ctx)
            return result
        try:
            result = await self._active(ctx)
        except ChildRejectedError as rejected:
            return await self._rejected(ctx, key, rejected)
        self.rejections.forget(key)
        return result

    async def _active(self, ctx: _Pass) -> Result:
        """A job that has not finished: suspend it, or resume it and run it."""
        info, status = ctx.info, ctx.status
        if (info.run_policy.get("suspend") or False) is True:
            await self._suspend(ctx)
            await self._write_status(ctx)
            return Result()
        if cond.is_true(status, cond.SUSPENDED):
            message = f"{self.framework.api.kind} {info.name} is resumed."
            reason = f"{self.framework.api.kind}Resumed"
            cond.set_condition(
                status, cond.SUSPENDED, reason=reason, message=message, now=ctx.stamp, true=False
            )
            status["startTime"] = ctx.stamp
            self.recorder.event(info.job, NORMAL, reason, message)
        return await self._run(ctx)

    async def _rejected(self, ctx: _Pass, key: str, rejected: ChildRejectedError) -> Result:
        """A child the API server will not take: fail the job, or say why while trying again."""
        if self.rejections.fails_job(key, rejected):
            kind, name = self.framework.api.kind, ctx.info.name
            await self._finish(
                ctx, succeeded=False, reason=rejected.reason, message=f"{kind} {name} has failed: {rejected}"
            )
            return self._ttl_result(ctx)
        if rejected.fail_after is None and cond.set_condition(
            ctx.status, cond.REPLICA_FAILURE, reason=rejected.reason, message=str(rejected), now=ctx.stamp
        ):
            await self._write_status(ctx)
        raise RetryLaterError(str(rejected))

    async def _run(self, ctx: _Pass) -> Result:
        kind, info, status = self.framework.api.kind, ctx.info, ctx.status
        obs = observe(info, ctx.pods)
        await self._copy_report(ctx, obs.report)
        new_restarts = self._count_restarts(status, obs)
        status["replicaStatuses"] = self._replica_statuses(info, obs)
        status.setdefault("startTime", ctx.stamp)

        succeeded = self.framework.succeeded(info, obs.counts, obs.pods)
        failure = (
            None
            if succeeded
            else fenced_failure(kind, info.name, obs.fenced)
            or self._limit_exceeded(ctx)
            or self._permanent_failure(info, obs)
        )
        if failure is not None:
            await self._finish(ctx, succeeded=False, reason=failure[0], message=failure[1])
            return self._ttl_result(ctx)
        if succeeded:
            message = f"{kind} {info.name} is successfully completed."
            await self._finish(ctx, succeeded=True, reason=f"{kind}Succeeded", message=message)
            return self._ttl_result(ctx)

        if new_restarts:
            failed_types = sorted({rtype for rtype, _ in obs.to_restart}) or ["in-place"]
            message = (
                f"{kind} {info.name} is restarting because {new_restarts} {', '.join(failed_types)} "
                "replica(s) failed."
            )
            cond.set_condition(
                status, cond.RESTARTING, reason=f"{kind}Restarting", message=message, now=ctx.stamp
            )
            metrics.jobs_restarted.labels(info.namespace, self.framework.api.framework_label).inc(
                new_restarts
            )
            self.recorder.event(info.job, WARNING, f"{kind}Restarting", message)
        elif self.framework.running(info, obs.counts):
            message = f"{kind} {info.name} is running."
            cond.set_condition(status, cond.RUNNING, reason=f"{kind}Running", message=message, now=ctx.stamp)

        work = self._plan(info, obs, ctx.services)
        if self.settings.gang is not None and not await self._sync_pod_group(ctx):
            await self._write_status(ctx)
            return Result(requeue_after=5.0)
        # Creating is safe before the status is written (and a round trip sooner); deleting waits for
        # the status, so a restart is on record before its pod goes. Every write of the gather ends
        # before the first failure is raised, so the status a rejection writes next is current.
        deferred = self._coalesce(ctx)
        outcomes = await asyncio.gather(
            self.writer.create_all(info.job, SERVICES, work.create_services, track=False),
            self.writer.create_all(info.job, PODS, work.create_pods, track=True),
            self._write_status(ctx) if deferred is None else asyncio.sleep(0),
            return_exceptions=True,
        )
        raise_first_failure(outcomes)
        if cond.remove(status, cond.REPLICA_FAILURE):  # the pods could be created again
            await self._write_status(ctx)
        await self.writer.delete_all(info.job, PODS, work.delete_pods)
        await self.writer.delete_all(info.job, SERVICES, work.delete_services)
        if work.create_pods or work.delete_pods:
            log.info(
                "job %s/%s: created %d pods and %d services, deleted %d pods",
                info.namespace,
                info.name,
                len(work.create_pods),
                len(work.create_services),
                len(work.delete_pods),
            )
        self._warn(info)
        await self._sync_hpa(info, suspended=False)
        return Result.soonest(self._deadline_result(ctx), Result(deferred))

    # -- decisions -----------------------------------------------------------------------------------
    def _ensure_created(self, ctx: _Pass) -> None:
        info, status = ctx.info, ctx.status
        if cond.find(status, cond.CREATED) is not None:
            return
        kind = self.framework.api.kind
        message = f"{kind} {info.name} is created."
        warning = lopsided_gpu_warning(info)
        if warning:
            message += f" Warning: {warning}."
            self.recorder.event(info.job, WARNING, "LopsidedGPURequests", warning)
        cond.set_condition(status, cond.CREATED, reason=f"{kind}Created", message=message, now=ctx.stamp)
        metrics.jobs_created.labels(info.namespace, self.framework.api.framework_label).inc()
        self.recorder.event(info.job, NORMAL, f"{kind}Created", message)

    def _count_restarts(self, status: dict[str, Any], obs: Observation) -> int:
        """Restarts since the last pass (in-place container restarts plus pods to recreate), each pod's
        counted once however often a pass repeats."""
        counted = status.get("countedPodRestarts")
        legacy = counted is None and status.get("restartCount") is not None
        tally = restarts.tally(None if legacy else counted or {}, obs.pod_failures)
        status.pop("observedContainerRestarts", None)  # the bookkeeping before countedPodRestarts
        status["countedPodRestarts"] = tally.counted
        status["restartCount"] = int(status.get("restartCount") or 0) + tally.total
        return tally.total

    def _replica_statuses(self, info: JobInfo, obs: Observation) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for rtype in info.replicas:
            counts = obs.counts.get(rtype)
            entry: dict[str, Any] = {}
            if counts is not None:
                entry.update(
                    {
                        k: v
                        for k, v in (
                            ("active", counts.active),
                            ("succeeded", counts.succeeded),
                            ("failed", counts.failed),
                        )
                        if v
                    }
                )
            labels = replica_labels(info, rtype)
            entry["selector"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            result[rtype] = entry
        return result

    def _limit_exceeded(self, ctx: _Pass) -> tuple[str, str] | None:
        kind, info, status = self.framework.api.kind, ctx.info, ctx.status
        limit = info.run_policy.get("backoffLimit")
        restarts = int(status.get("restartCount") or 0)
        if limit is not None and restarts > int(limit):
            return (
                "BackoffLimitExceeded",
                f"{kind} {info.name} has failed because it has reached the specified "
                f"backoff limit: {restarts} restarts, backoffLimit {limit}",
            )
        deadline = info.run_policy.get("activeDeadlineSeconds")
        started = parse_time(status.get("startTime"))
        if (
            deadline is not None
            and started is not None
            and (ctx.now - started).total_seconds() >= int(deadline)
        ):
            return (
                "DeadlineExceeded",
                f"{kind} {info.name} has failed because it was active longer than the "
                f"specified deadline of {deadline}s",
            )
        return None

    def _permanent_failure(self, info: JobInfo, obs: Observation) -> tuple[str, str] | None:
        if not obs.permanent_failures:
            return None
        rtype, pod, code = obs.permanent_failures[0]
        count = sum(1 for t, _, _ in obs.permanent_failures if t == rtype)
        detail = (
            f"{pod['metadata']['name']} exited with code {code}"
            if code != 0xBEEF
            else f"{pod['metadata']['name']} failed ({pod.get('status', {}).get('reason') or 'no exit code'})"
        )
        policy = info.replicas[rtype].restart_policy
        return (
            f"{self.framework.api.kind}Failed",
            f"{self.framework.api.kind} {info.name} has failed because {count} "
            f"{rtype} replica(s) failed: {detail} (restartPolicy {policy})",
        )

    def _plan(self, info: JobInfo, obs: Observation, services: list[Obj]) -> _Work:
        work = _Work(delete_pods=[*(pod for _, pod in obs.to_restart), *obs.out_of_range])
        existing_services = {
            s["metadata"]["name"]: s for s in services if not s["metadata"].get("deletionTimestamp")
        }
        for rtype, replica in info.replicas.items():
            for index in range(replica.replicas):
                identity = (rtype, index)
                if identity not in obs.pods and identity not in obs.terminating:
                    work.create_pods.append(build_pod(info, rtype, index, self.plugins))
                if naming.replica_name(info.name, rtype, index) not in existing_services:
                    work.create_services.append(build_service(info, rtype, index))
        wanted = {
            naming.replica_name(info.name, t, i) for t, r in info.replicas.items() for i in range(r.replicas)
        }
        work.delete_services = [s for n, s in existing_services.items() if n not in wanted]
        return work

    # -- finishing, suspending, cleanup --------------------------------------------------------------
    async def _finish(self, ctx: _Pass, *, succeeded: bool, reason: str, message: str) -> None:
        """Write the terminal status, then clean up: a failed write leaves every pod in place."""
        info, status = ctx.info, ctx.status
        ctype = cond.SUCCEEDED if succeeded else cond.FAILED
        cond.set_condition(status, ctype, reason=reason, message=message, now=ctx.stamp)
        status.setdefault("completionTime", ctx.stamp)
        await self._write_status(ctx)
        counter = metrics.jobs_successful if succeeded else metrics.jobs_failed
        counter.labels(info.namespace, self.framework.api.framework_label).inc()
        self.recorder.event(info.job, NORMAL if succeeded else WARNING, reason, message)
        log.info("job %s/%s %s: %s", info.namespace, info.name, ctype.lower(), message)
        await self._cleanup(ctx, finished=True)

    async def _finished(self, ctx: _Pass) -> Result:
        # Rank 0's final report can land after the job finished (another replica failed first).
        await self._copy_report(ctx, observe(ctx.info, ctx.pods).report)
        await self._cleanup(ctx, finished=True)
        ttl = self._ttl_result(ctx)
        if ttl.requeue_after == 0:
            await self._delete_job(ctx.info)
            return Result()
        return ttl

    async def _copy_report(self, ctx: _Pass, report: dict[str, Any] | None) -> None:
        """Copy rank 0's report from the job's pods, or else from a deleted one (``DepartedPods``)."""
        info = ctx.info
        key = f"{info.namespace}/{info.name}"
        departed = self.departed.take(key)
        try:
            await self.writer.copy_report(
                self.framework.api.resource, self.jobs, info.job, report or rank0_report(info, departed)
            )
        except BaseException:
            self.departed.restore(key, departed)
            raise

    async def _suspend(self, ctx: _Pass) -> None:
        kind, info, status = self.framework.api.kind, ctx.info, ctx.status
        await self._cleanup(ctx, finished=False)
        await self._sync_hpa(info, suspended=True)
        for entry in (status.get("replicaStatuses") or {}).values():
            entry.pop("active", None)
        message = f"{kind} {info.name} is suspended."
        for ctype in (cond.RUNNING, cond.RESTARTING):
            cond.set_false(status, ctype, reason=f"{kind}Suspended", message=message, now=ctx.stamp)
        if cond.set_condition(
            status, cond.SUSPENDED, reason=f"{kind}Suspended", message=message, now=ctx.stamp
        ):
            self.recorder.event(info.job, NORMAL, f"{kind}Suspended", message)

    async def _cleanup(self, ctx: _Pass, *, finished: bool) -> None:
        """Delete what ``cleanup_targets`` says, and the pod group."""
        info = ctx.info
        doomed, doomed_services = cleanup_targets(
            ctx.pods,
            ctx.services,
            policy=info.run_policy.get("cleanPodPolicy") or "None",
            finished=finished,
            failed=cond.is_true(ctx.status, cond.FAILED),
        )
        outcomes = await asyncio.gather(
            self.writer.delete_all(info.job, PODS, doomed),
            self.writer.delete_all(info.job, SERVICES, doomed_services),
            return_exceptions=True,
        )
        raise_first_failure(outcomes)
        if self.settings.gang is not None:
            cached = self.pod_groups.get(f"{info.namespace}/{info.name}") if self.pod_groups else None
            if await self.writer.delete_owned(info.job, self.settings.gang.resource, cached):
                self.recorder.event(
                    info.job, NORMAL, "SuccessfulDeletePodGroup", f"Deleted PodGroup: {info.name}"
                )

    def _ttl_result(self, ctx: _Pass) -> Result:
        ttl = ctx.info.run_policy.get("ttlSecondsAfterFinished")
        completed = parse_time(ctx.status.get("completionTime"))
        if ttl is None or completed is None:
            return Result()
        remaining = (completed - ctx.now).total_seconds() + int(ttl)
        return Result(requeue_after=max(0.0, remaining))

    def _deadline_result(self, ctx: _Pass) -> Result:
        deadline = ctx.info.run_policy.get("activeDeadlineSeconds")
        started = parse_time(ctx.status.get("startTime"))
        if deadline is None or started is None:
            return Result()
        return Result(requeue_after=max(0.0, (started - ctx.now).total_seconds() + int(deadline)))

    async def _delete_job(self, info: JobInfo) -> None:
        if await self.kube.delete(self.framework.api.resource, info.name, info.namespace, uid=info.uid):
            metrics.jobs_deleted.labels(info.namespace, self.framework.api.framework_label).inc()
            self.recorder.event(info.job, NORMAL, "SuccessfulDeleteJob", f"Deleted job: {info.name} (TTL)")
            log.info("job %s/%s deleted: ttlSecondsAfterFinished passed", info.namespace, info.name)

    # -- writes --------------------------------------------------------------------------------------
    def _coalesce(self, ctx: _Pass) -> float | None:
        """Seconds to hold back a write that only updates replica counts, so a burst of pod events
        becomes one status write; None to write now. Condition changes are never held back."""
        changed = set(merge_patch(ctx.original, ctx.status))
        if not changed or not changed <= {"replicaStatuses"}:
            return None
        since = time.monotonic() - self._last_write.get(
            f"{ctx.info.namespace}/{ctx.info.name}", -COALESCE_SECONDS
        )
        return COALESCE_SECONDS - since if since < COALESCE_SECONDS else None

    async def _write_status(self, ctx: _Pass) -> None:
        """Merge-patch the status, guarded by the job's resourceVersion, when this pass changed it.

        The written version becomes the pass's baseline, so a later write of the same pass sends
        only what changed since, under the new resourceVersion."""
        if ctx.status == ctx.original:
            return
        status = ctx.status
        meta = ctx.info.job["metadata"]
        body = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": merge_patch(ctx.original, status),
        }
        updated = await self.kube.patch(
            self.framework.api.resource, meta["name"], body, namespace=meta["namespace"], subresource="status"
        )
        self.jobs.observe_write(updated)
        ctx.info.job["metadata"] = updated["metadata"]
        ctx.original = copy.deepcopy(status)
        self._last_write[f"{meta['namespace']}/{meta['name']}"] = time.monotonic()
        log.info("job %s/%s status: %s", meta["namespace"], meta["name"], cond.state(status) or "-")

    def _warn(self, info: JobInfo) -> None:
        for warning in dict.fromkeys(info.warnings):
            self.recorder.event(info.job, WARNING, "PodTemplateOverridden", warning)

    # -- gang scheduling and elastic autoscaling -------------------------------------------------------
    async def _sync_pod_group(self, ctx: _Pass) -> bool:
        """Make the job's pod group match the spec; returns whether pods may be created now.

        The native PodGroup's spec is immutable, so a changed size replaces it, and only while the job
        has no pods (a suspend and resume gets there); the other schedulers' groups are patched.
        """
        info, gang = ctx.info, self.settings.gang
        assert gang is not None
        desired = gang.pod_group(info)
        existing = self.pod_groups.get(f"{info.namespace}/{info.name}") if self.pod_groups else None
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            ctx.status["lastReconcileTime"] = ctx.stamp
            return False  # the old group is still going away; its deletion event requeues the job
        if existing is not None:
            require_ours(info.job, gang.resource, existing)
        if existing is None:
            try:
                existing = await self.kube.create(gang.resource, desired, info.namespace)
                self.recorder.event(
                    info.job, NORMAL, "SuccessfulCreatePodGroup", f"Created PodGroup: {info.name}"
                )
            except errors.APIConflictError:
                existing = await check_existing(self.kube, info.job, gang.resource, info.name)
        elif existing.get("spec") != desired["spec"] and any(
            k not in existing.get("spec", {}) or existing["spec"][k] != v for k, v in desired["spec"].items()
        ):
            if gang.native:
                if not ctx.pods:
                    await self.writer.delete_owned(info.job, gang.resource, existing)
                    ctx.status["lastReconcileTime"] = ctx.stamp
                    return False
            else:
                await self.kube.patch(
                    gang.resource, info.name, {"spec": desired["spec"]}, namespace=info.namespace
                )
        if existing is not None and gang.admitted(existing):
            return True
        ctx.status["lastReconcileTime"] = ctx.stamp
        return False

    async def _sync_hpa(self, info: JobInfo, *, suspended: bool) -> None:
        elastic = info.spec.get("elasticPolicy") or {}
        if self.framework.api is not PYTORCHJOB or not elastic.get("metrics"):
            return
        current = await self.kube.get(HPAS, info.name, info.namespace)
        if current is not None:
            require_ours(info.job, HPAS, current)
        if suspended:
            await self.writer.delete_owned(info.job, HPAS, current)
            return
        desired = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {
                "name": info.name,
                "namespace": info.namespace,
                "ownerReferences": [info.owner_reference()],
            },
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": info.job["apiVersion"],
                    "kind": info.job["kind"],
                    "name": info.name,
                },
                "minReplicas": elastic["minReplicas"],
                "maxReplicas": elastic["maxReplicas"],
                "metrics": elastic["metrics"],
            },
        }
        if current is None:
            try:
                await self.kube.create(HPAS, desired, info.namespace)
            except errors.APIConflictError:
                await check_existing(self.kube, info.job, HPAS, info.name)
        elif current.get("spec") != desired["spec"]:
            await self.kube.patch(HPAS, info.name, {"spec": desired["spec"]}, namespace=info.namespace)


def cleanup_targets(
    pods: list[Obj], services: list[Obj], *, policy: str, finished: bool, failed: bool
) -> tuple[list[Obj], list[Obj]]:
    """The pods and services to delete when a job finishes or is suspended.

    Suspending deletes everything. A finished job follows ``cleanPodPolicy`` (``All``: every pod;
    ``Running``: pods still running or pending; ``None``: none), with one difference from upstream: a
    *failed* job never keeps a pod running, whatever the policy, because a resubmitted attempt would
    train beside it on the same checkpoint dir (docs/job-lifecycle.md). The services of deleted pods go
    with them (all of them under ``All`` and when suspending).
    """
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    running = [p for p in live if p.get("status", {}).get("phase") in ("Running", "Pending", None)]
    if not finished or policy == "All":
        doomed = live
    elif policy == "Running" or failed:
        doomed = running
    else:
        doomed = []
    names = {p["metadata"]["name"] for p in doomed}
    everything = not finished or policy == "All"
    doomed_services = [
        s
        for s in services
        if not s["metadata"].get("deletionTimestamp") and (everything or s["metadata"]["name"] in names)
    ]
    return doomed, doomed_services
