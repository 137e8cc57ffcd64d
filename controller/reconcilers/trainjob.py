"""Reconcile a TrainJob (trainer.kubeflow.org/v1alpha1) straight into pods.

Upstream writes a JobSet and leaves the pods to two more controllers; kubetrain
creates the pods itself (``reconcilers.jobset`` holds the JobSet and Job
semantics), which is one controller to run, one cache to keep, and no lag
between three reconcile loops. One pass, level-triggered, reading caches:

1. skip TrainJobs another controller manages or that are being deleted;
2. a finished TrainJob: delete what still runs, delete the TrainJob once its
   ``kubetrain.dev/ttl-seconds-after-finished`` has passed;
3. resolve the runtime: the snapshot ConfigMap ``<tj>-runtime-snapshot`` once
   it exists (so editing or deleting a runtime never changes a running job),
   else the live runtime, which is then snapshotted; a runtime that does not
   exist yet is waited for, with a ``Created=False`` condition saying so;
4. build the pod sets (``kubetrain.trainjob.build``) and let the ML policy wire them;
   a TrainJob that cannot be built (``BuildError``) fails with that message;
5. suspended: delete the pods; resumed: restart the deadline clock;
6. past ``spec.activeDeadlineSeconds``: Failed, reason ``DeadlineExceeded``;
7. otherwise digest the pods into child Jobs and decide as JobSet would:
   restart or fail on a failed Job, complete on success, else create the pods
   whose dependencies are met;
8. write the status, and requeue at the next deadline or TTL.

A terminal status is always written before anything is cleaned up, and a child
the API server will not take (a name held by another owner, a pod template it
rejects pass after pass) fails the TrainJob with the API server's message.

docs/trainjob.md describes the behaviour for users.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Unpack

import yaml

from kubetrain import naming
from kubetrain.api import v2
from kubetrain.api.kinds import CLUSTER_TRAINING_RUNTIME, RUNTIMES, TRAINING_RUNTIME, TRAINJOB
from kubetrain.client.kinds import disruption
from kubetrain.controller import diagnosis, metrics
from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.plugins.gang import GangScheduler, TrainJobGangPlugin, trainjob_gang
from kubetrain.controller.plugins.gpu import GpuPlugin
from kubetrain.controller.plugins.logtail import LogTailPlugin
from kubetrain.controller.reconcilers import conditions as cond
from kubetrain.controller.reconcilers import jobset, stalls
from kubetrain.controller.reconcilers.conditions import COMPLETE, CREATED, FAILED, REPLICA_FAILURE, SUSPENDED
from kubetrain.controller.reconcilers.observe import fenced_failure, fenced_off, termination_report
from kubetrain.controller.reconcilers.skeleton import (
    OWNER_INDEX,
    JobReconciler,
    Pass,
    Shared,
    parse_time,
    seconds_left,
)
from kubetrain.controller.reconcilers.tls_config import sync_tls_config
from kubetrain.controller.reconcilers.writes import (
    ChildRejectedError,
    Ownership,
    check_existing,
    ownership,
    raise_first_failure,
    require_ours,
)
from kubetrain.controller.state import JobIdentity, Obj, PodPlugin
from kubetrain.kube import errors
from kubetrain.kube.events import NORMAL, WARNING
from kubetrain.kube.informer import Handler, Informer
from kubetrain.kube.resources import CONFIGMAPS, PODS, PVCS, SECRETS, SERVICES
from kubetrain.kube.runner import Result, RetryLaterError
from kubetrain.trainjob.build import build, retained_claim_of
from kubetrain.trainjob.outputs import outputs_at_risk
from kubetrain.trainjob.state import NODE, BuildError, Extra, TrainJobInfo

log = logging.getLogger("kubetrain.controller")

CONDITIONS = cond.TRAINJOB  # a TrainJob has Created only while its runtime is missing (upstream has none)
RUNTIME_NOT_FOUND = "TrainingRuntimeNotFound"
BUILD_ERROR = "BuildError"
RUNTIME_MISSING_RETRY = 10.0


def snapshot_name(trainjob: str) -> str:
    return f"{trainjob}-runtime-snapshot"


@dataclass
class _Pass(Pass):
    pods: list[Obj] = field(default_factory=list)
    gang: GangScheduler | None = None  # decided once per pass, when the pod sets are built


class TrainJobReconciler(JobReconciler):
    name = "trainjob"
    resource = TRAINJOB.resource
    conditions = CONDITIONS

    def __init__(
        self, *, runtimes: Informer, cluster_runtimes: Informer, snapshots: Informer, **shared: Unpack[Shared]
    ) -> None:
        super().__init__(**shared)
        self.runtimes = runtimes
        self.cluster_runtimes = cluster_runtimes
        self.snapshots = snapshots
        self._snapshot_runtimes: dict[str, tuple[str, Obj]] = {}  # TrainJob key -> (resourceVersion, runtime)
        managed = set(self.settings.managed_by)
        if naming.MANAGED_BY_TRAINING_OPERATOR in managed:  # compatible mode: also take upstream TrainJobs
            managed.add(v2.MANAGED_BY_UPSTREAM)
        self.managed_by = frozenset(managed)

    def forget(self, key: str) -> None:
        super().forget(key)
        self._snapshot_runtimes.pop(key, None)

    def runtime_handler(self, enqueue: Callable[[str], None]) -> Handler:
        """A runtime that appears or changes enqueues the TrainJobs still waiting for it."""

        def handle(old: Obj | None, new: Obj | None) -> None:
            obj = new if new is not None else old
            assert obj is not None
            kind, name = obj.get("kind"), obj["metadata"]["name"]
            namespace = obj["metadata"].get("namespace")
            for job in self.jobs.objects():
                ref = job.get("spec", {}).get("runtimeRef") or {}
                if ref.get("name") != name or (ref.get("kind") or CLUSTER_TRAINING_RUNTIME.kind) != kind:
                    continue
                if namespace and job["metadata"]["namespace"] != namespace:
                    continue
                if self.snapshots.get(
                    f"{job['metadata']['namespace']}/{snapshot_name(job['metadata']['name'])}"
                ):
                    continue
                enqueue(f"{job['metadata']['namespace']}/{job['metadata']['name']}")

        return handle

    # -- a pass ----------------------------------------------------------------------------------------
    def manages(self, job: Obj) -> bool:
        return (job.get("spec") or {}).get("managedBy") in self.managed_by

    async def reconcile_job(self, key: str, cached: Obj) -> Result:
        job = {**cached, "metadata": copy.deepcopy(cached["metadata"])}
        status = copy.deepcopy(cached.get("status") or {})
        ctx = _Pass(
            job=job,
            status=status,
            original=copy.deepcopy(status),
            now=self.clock(),
            pods=self.pods.by_index(OWNER_INDEX, job["metadata"]["uid"]),
        )
        if CONDITIONS.is_finished(status):
            return await self._finished(ctx)
        info: TrainJobInfo | None = None
        try:
            runtime = await self._runtime(ctx)
            if runtime is None:
                await self.write_status(ctx)
                if CONDITIONS.is_finished(status):  # an unsupported runtime kind failed it
                    return self._ttl_result(ctx)
                return Result(requeue_after=RUNTIME_MISSING_RETRY)
            try:
                info = build(job, runtime)
            except BuildError as exc:
                self.recorder.event(job, WARNING, "TrainJobResourcesCreationFailed", str(exc))
                await self._finish(ctx, None, False, BUILD_ERROR, f"TrainJob {key} cannot be built: {exc}")
                return self._ttl_result(ctx)
            ctx.gang = self._gang(info)
            result = await self._active(ctx, info)
        except ChildRejectedError as rejected:
            return await self._rejected(ctx, info, rejected)
        self.rejections.forget(key)
        return result

    async def _rejected(self, ctx: _Pass, info: TrainJobInfo | None, rejected: ChildRejectedError) -> Result:
        """A child the API server will not take: fail the TrainJob, or say why while trying again."""
        if self.rejections.fails_job(ctx.key, rejected):
            await self._finish(
                ctx, info, False, rejected.reason, f"TrainJob {ctx.key} has failed: {rejected}"
            )
            return self._ttl_result(ctx)
        if rejected.fail_after is None and CONDITIONS.set(
            ctx.status,
            REPLICA_FAILURE,
            true=True,
            reason=rejected.reason,
            message=str(rejected),
            now=ctx.stamp,
        ):
            await self.write_status(ctx)
        raise RetryLaterError(str(rejected))

    async def _active(self, ctx: _Pass, info: TrainJobInfo) -> Result:
        """A TrainJob that has not finished: suspend it, or resume it and run it."""
        job, status = ctx.job, ctx.status
        if (job.get("spec") or {}).get("suspend") is True:
            await self._suspend(ctx, info)
            return Result()
        if cond.is_true(status, SUSPENDED):
            CONDITIONS.set(
                status, SUSPENDED, true=False, reason="Resumed", message="TrainJob is resumed", now=ctx.stamp
            )
            self.recorder.event(job, NORMAL, "Resumed", f"TrainJob {info.name} is resumed")
        deadline = self._deadline(ctx)
        if deadline is not None and deadline <= 0:
            limit = job["spec"]["activeDeadlineSeconds"]
            await self._finish(
                ctx, info, False, cond.DEADLINE_EXCEEDED, f"TrainJob exceeded its active deadline of {limit}s"
            )
            return self._ttl_result(ctx)
        return Result.soonest(
            await self._run(ctx, info), Result(requeue_after=deadline) if deadline is not None else Result()
        )

    async def _restart_or_fail(
        self, ctx: _Pass, info: TrainJobInfo, obs: jobset.Observation, attempt: int
    ) -> Result | None:
        """Restart the attempt for a disruption (uncounted) or failed child Jobs (per ``failurePolicy``),
        or fail the job; None when the attempt goes on."""
        status = ctx.status
        if obs.disrupted:
            names = ", ".join(f"{p['metadata']['name']} ({disruption(p)})" for p in obs.disrupted)
            status["disruptions"] = int(status.get("disruptions") or 0) + len(obs.disrupted)
            cut_short = jobset.disrupted_gpu_seconds(ctx.pods, obs, ctx.now)
            if cut_short:
                status["disruptedGPUSeconds"] = int(status.get("disruptedGPUSeconds") or 0) + cut_short
            metrics.jobs_disrupted.labels(info.namespace, _framework(info)).inc(len(obs.disrupted))
            message = (
                f"TrainJob {info.name}: stopped by a disruption: {names}; restarting all pods, not counted"
            )
            return await self._restart(ctx, info, attempt, "Disrupted", message, counts=False)
        failed = [j for j in obs.jobs if j.failed]
        if not failed:
            return None
        decision = jobset.on_job_failure(info, failed, int(status.get("restartsCountTowardsMax") or 0))
        if not decision.restart:
            await self._finish(ctx, info, False, decision.reason, decision.message)
            return self._ttl_result(ctx)
        metrics.jobs_restarted.labels(info.namespace, _framework(info)).inc()
        return await self._restart(ctx, info, attempt, "Restarting", decision.message, counts=decision.counts)

    async def _stall(
        self, ctx: _Pass, info: TrainJobInfo, obs: jobset.Observation, attempt: int
    ) -> tuple[Result | None, float | None]:
        """Restart the attempt (counted) when every pod runs but nothing was reported for the stall
        timeout, or fail the job once it stalled too often; else when to look again."""
        policy = stalls.StallPolicy.of(ctx.job)
        if policy is None or obs.stale or obs.terminating_stale:
            return None, None
        live = [p for j in obs.jobs for p in j.live.values()]
        if len(live) < sum(s.replicas * s.count for s in info.pod_sets):
            return None, None
        stall, wait = stalls.check(policy, {**ctx.job, "status": ctx.status}, live, ctx.now)
        if stall is None:
            return None, wait
        message, fails = stalls.record(ctx.status, stall, policy, f"TrainJob {info.name}", ctx.stamp)
        if fails:
            await self._finish(ctx, info, False, stalls.STALLED, message)
            return self._ttl_result(ctx), None
        metrics.jobs_restarted.labels(info.namespace, _framework(info)).inc()
        return await self._restart(ctx, info, attempt, stalls.STALLED, message, counts=True), None

    async def _restart(
        self, ctx: _Pass, info: TrainJobInfo, attempt: int, reason: str, message: str, *, counts: bool
    ) -> Result:
        """Start restart attempt ``attempt + 1``: every pod goes, new ones get the attempt's label."""
        status = ctx.status
        status["restarts"] = attempt + 1
        status["jobFailures"] = {}  # a new attempt: new child Jobs, new counts
        status["countedPodRestarts"] = {}
        for key in ("failedIndexes", "jobStartTimes"):
            status.pop(key, None)
        if counts:
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax") or 0) + 1
        self.recorder.event(info.job, WARNING, reason, message)
        log.info("trainjob %s restarting (attempt %d): %s", ctx.key, attempt + 1, message)
        await self.write_status(ctx)
        await self.writer.delete_all(
            info.job, PODS, [p for p in ctx.pods if not p["metadata"].get("deletionTimestamp")]
        )
        return Result()

    async def _run(self, ctx: _Pass, info: TrainJobInfo) -> Result:
        status = ctx.status
        attempt = int(status.get("restarts") or 0)
        legacy = status.get("countedPodRestarts") is None and status.get("jobsStatus") is not None
        obs = jobset.observe(
            info,
            ctx.pods,
            attempt,
            job_failures=status.get("jobFailures"),
            counted=None if legacy else status.get("countedPodRestarts") or {},
            failed_indexes=status.get("failedIndexes"),
            started=status.get("jobStartTimes"),
            now=ctx.now,
        )
        await self._copy_report(ctx, info, obs)
        _record(status, info, obs)
        fenced = fenced_failure(TRAINJOB.kind, info.name, _fenced_pods(obs))
        if fenced is not None:
            await self._finish(ctx, info, False, *fenced)
            return self._ttl_result(ctx)
        stopped = await self._restart_or_fail(ctx, info, obs, attempt)
        if stopped is not None:
            return stopped
        if jobset.succeeded(info, obs):
            await self._finish(
                ctx, info, True, "AllJobsCompleted", f"TrainJob {info.name} completed: every job succeeded"
            )
            return self._ttl_result(ctx)

        stalled, stall_wait = await self._stall(ctx, info, obs, attempt)
        if stalled is not None:
            return stalled
        if obs.stale or obs.terminating_stale:
            # Pods of an earlier restart attempt hold the hostnames; new pods wait until they are gone.
            await self.write_status(ctx)
            await self.writer.delete_all(info.job, PODS, obs.stale)
            return Result()
        plugins = self._plugins(ctx.gang)
        creates = [
            jobset.build_pod(info, child, index, attempt=attempt, plugins=plugins)
            for child in obs.jobs
            if not child.complete and jobset.depends_on_met(info, child.pod_set, obs)
            for index in child.missing()
        ]
        if creates:
            await self._prepare(info, ctx.gang)
        outcomes = await asyncio.gather(
            self.writer.create_all(info.job, PODS, creates, track=True),
            self.write_status(ctx),
            return_exceptions=True,
        )
        raise_first_failure(outcomes)
        if cond.find(status, REPLICA_FAILURE) is not None:  # the pods could be created again
            cond.remove(status, REPLICA_FAILURE)
            await self.write_status(ctx)
        for warning in dict.fromkeys(info.warnings):
            self.recorder.event(info.job, WARNING, "PodTemplateOverridden", warning)
        if creates:
            log.info("trainjob %s: created %d pods", ctx.key, len(creates))
        # a child Job's activeDeadlineSeconds, or when the job could next be stalled
        wake = [t for t in (obs.next_deadline(ctx.now), stall_wait) if t is not None]
        return Result(requeue_after=min(wake, default=None))

    # -- the runtime -----------------------------------------------------------------------------------
    async def _runtime(self, ctx: _Pass) -> Obj | None:
        """The snapshot of the TrainJob's runtime, taken from the live runtime on first sight."""
        meta = ctx.job["metadata"]
        snapshot = self.snapshots.get(f"{meta['namespace']}/{snapshot_name(meta['name'])}")
        if snapshot is not None:
            require_ours(ctx.job, CONFIGMAPS, snapshot)
            return self._snapshot_runtime(ctx.key, snapshot)
        ref = (ctx.job.get("spec") or {}).get("runtimeRef") or {}
        group = ref.get("apiGroup") or v2.GROUP
        kind = ref.get("kind") or CLUSTER_TRAINING_RUNTIME.kind
        if group != v2.GROUP or kind not in (k.kind for k in RUNTIMES):
            message = f"unsupported runtime: {kind}.{group}"
            if CONDITIONS.set(
                ctx.status,
                FAILED,
                true=True,
                reason="TrainingRuntimeNotSupported",
                message=message,
                now=ctx.stamp,
            ):
                self.recorder.event(ctx.job, WARNING, "TrainingRuntimeNotSupported", message)
            return None
        if CONDITIONS.is_finished(ctx.status):
            return None
        name = ref.get("name", "")
        live = (
            self.runtimes.get(f"{meta['namespace']}/{name}")
            if kind == TRAINING_RUNTIME.kind
            else self.cluster_runtimes.get(name)
        )
        if live is None:
            where = f" in namespace {meta['namespace']}" if kind == TRAINING_RUNTIME.kind else ""
            message = (
                f"{kind} {name!r} not found{where}; create it (kubectl get {CLUSTER_TRAINING_RUNTIME.plural} "
                "lists the installed ones) or fix spec.runtimeRef"
            )
            CONDITIONS.set(
                ctx.status, CREATED, true=False, reason=RUNTIME_NOT_FOUND, message=message, now=ctx.stamp
            )
            self.recorder.event(ctx.job, WARNING, "TrainJobResourcesCreationFailed", message)
            return None
        cond.remove(ctx.status, CREATED)
        runtime = {
            "apiVersion": v2.API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "labels": dict(live["metadata"].get("labels") or {})},
            "spec": live.get("spec") or {},
        }
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": snapshot_name(meta["name"]),
                "namespace": meta["namespace"],
                "labels": {naming.TRAINJOB_RUNTIME_SNAPSHOT: meta["name"]},
                "ownerReferences": [JobIdentity(ctx.job).owner_reference()],
            },
            "data": {"runtime": yaml.safe_dump(runtime, sort_keys=False)},
        }
        try:
            created = await self.kube.create(CONFIGMAPS, body, meta["namespace"])
            self.snapshots.observe_write(created)
            metrics.jobs_created.labels(meta["namespace"], _framework_of(runtime)).inc()
            self.recorder.event(
                ctx.job, NORMAL, "TrainJobCreated", f"TrainJob {meta['name']} uses {kind} {name}"
            )
        except errors.APIConflictError:
            # An earlier pass took it (it holds the same runtime), or the name is someone else's.
            await check_existing(self.kube, ctx.job, CONFIGMAPS, snapshot_name(meta["name"]))
        return runtime

    def _snapshot_runtime(self, key: str, snapshot: Obj) -> Obj:
        """The runtime a snapshot holds, parsed once per resourceVersion of the snapshot (parsing the
        YAML costs more than the rest of a pass). The result is shared across passes: read only."""
        version = str(snapshot["metadata"].get("resourceVersion") or "")
        cached = self._snapshot_runtimes.get(key)
        if version and cached is not None and cached[0] == version:
            return cached[1]
        runtime: Obj = yaml.safe_load(snapshot.get("data", {}).get("runtime") or "{}")
        self._snapshot_runtimes[key] = (version, runtime)
        return runtime

    # -- lifecycle -------------------------------------------------------------------------------------
    async def _finish(
        self, ctx: _Pass, info: TrainJobInfo | None, complete: bool, reason: str, message: str
    ) -> None:
        """Write the terminal status, then clean up: a failed write leaves every pod in place."""
        cond.remove(ctx.status, REPLICA_FAILURE)  # a finished job creates nothing more
        if not complete:
            first = diagnosis.first_failure(
                _replicas(ctx.pods),
                containers=reason != cond.DEADLINE_EXCEEDED,
                log_tail=diagnosis.wants_log_tail(ctx.job["metadata"].get("annotations") or {}),
            )
            if first is not None:
                ctx.status["firstFailure"] = first.as_status()
                message = f"{message}; {first.describe()}"
        CONDITIONS.set(
            ctx.status,
            COMPLETE if complete else FAILED,
            true=True,
            reason=reason,
            message=message,
            now=ctx.stamp,
        )
        jobset.settle_jobs_status(ctx.status.get("jobsStatus") or [], complete=complete)
        await self.write_status(ctx)
        counter = metrics.jobs_successful if complete else metrics.jobs_failed
        counter.labels(ctx.namespace, _framework(info)).inc()
        self.recorder.event(ctx.job, NORMAL if complete else WARNING, reason, message)
        log.info("trainjob %s %s: %s", ctx.key, "complete" if complete else "failed", message)
        await self._cleanup(ctx)

    async def _finished(self, ctx: _Pass) -> Result:
        """A finished TrainJob: the last report, cleanup, the JobSet's TTL, and deletion once its TTL has
        passed, unless that would delete the claim holding its output (then the deletion is held)."""
        info = self._snapshot_info(ctx)
        at_risk: tuple[str, str] | None = None
        jobset_ttl = Result()
        if info is not None:
            ctx.gang = self._gang(info)
            obs = jobset.observe(info, ctx.pods, int(ctx.status.get("restarts") or 0))
            await self._copy_report(
                ctx, info, obs
            )  # rank 0's report can land after another pod failed the job
            at_risk = outputs_at_risk(info)
            jobset_ttl = await self._jobset_ttl(ctx, info, keep=None if at_risk is None else at_risk[1])
        await self._cleanup(ctx)
        # A TrainJob that finished before this controller version settled its counts gets them settled.
        jobset.settle_jobs_status(
            ctx.status.get("jobsStatus") or [], complete=cond.is_true(ctx.status, COMPLETE)
        )
        ttl = self._ttl_result(ctx)
        delete = ttl.requeue_after == 0
        if delete and at_risk is not None:
            delete = False
            self._hold_deletion(ctx, *at_risk)
        await self.write_status(ctx)
        if delete:
            await self.delete_expired(ctx, _framework(info), f"Deleted TrainJob {ctx.name} (TTL)")
            return Result()
        return Result.soonest(Result() if ttl.requeue_after == 0 else ttl, jobset_ttl)

    def _hold_deletion(self, ctx: _Pass, path: str, claim: str) -> None:
        """The TTL passed, but deleting the TrainJob would delete ``claim`` (its runtime's
        ``volumeClaimPolicies`` own it) and ``path`` on it: keep the TrainJob, saying why."""
        message = (
            f"{naming.ANNOTATION_TTL_AFTER_FINISHED} passed, but deleting TrainJob {ctx.name} would delete "
            f"the claim {claim}, which holds {path}; the TrainJob is kept. Copy the output and delete the "
            "TrainJob yourself, or run on a runtime that retains the claim (retentionPolicy.whenDeleted: Retain)"
        )
        if cond.note_on_finished(
            ctx.status, cond.DELETION_HELD, reason="OutputOnOwnedClaim", message=message, now=ctx.stamp
        ):
            self.recorder.event(ctx.job, WARNING, cond.DELETION_HELD, message)
            log.info("trainjob %s: deletion held: %s", ctx.key, message)

    async def _jobset_ttl(self, ctx: _Pass, info: TrainJobInfo, *, keep: str | None = None) -> Result:
        """The runtime's ``ttlSecondsAfterFinished`` (JobSet's): once it has passed, delete what JobSet's
        deletion takes with it (every pod, finished ones too, the headless Service and the claims it owns,
        except ``keep``, the claim that holds the job's output); the TrainJob stays. Before that, look
        again when it will have passed."""
        limit = (info.jobset.get("spec") or {}).get("ttlSecondsAfterFinished")
        left = seconds_left(self._finished_at(ctx), limit, ctx.now)
        if left is None or left > 0:
            return Result(requeue_after=left)
        pods = [p for p in ctx.pods if not p["metadata"].get("deletionTimestamp")]
        await self.writer.delete_all(ctx.job, PODS, pods)
        await self.writer.delete_owned(
            ctx.job, SERVICES, self.services.get(f"{info.namespace}/{info.subdomain}")
        )
        for extra in info.extras:
            if extra.resource is PVCS and not extra.retained and extra.name != keep:
                claim = await self.kube.get(PVCS, extra.name, info.namespace)
                await self.writer.delete_owned(ctx.job, PVCS, claim)
        return Result()

    def _finished_at(self, ctx: _Pass) -> dt.datetime | None:
        finished = cond.find(ctx.status, COMPLETE if cond.is_true(ctx.status, COMPLETE) else FAILED)
        return None if finished is None else parse_time(finished.get("lastTransitionTime"))

    def _snapshot_info(self, ctx: _Pass) -> TrainJobInfo | None:
        """The build of a TrainJob from its own runtime snapshot, if it has one that builds."""
        meta = ctx.job["metadata"]
        snapshot = self.snapshots.get(f"{meta['namespace']}/{snapshot_name(meta['name'])}")
        if snapshot is None or ownership(snapshot, ctx.job) is not Ownership.OURS:
            return None
        try:
            return build(ctx.job, self._snapshot_runtime(ctx.key, snapshot))
        except BuildError:
            return None

    async def _cleanup(self, ctx: _Pass) -> None:
        """Delete the pods that still run (finished pods stay, for their logs) and the pod group."""
        running = [
            p
            for p in ctx.pods
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        await self.writer.delete_all(ctx.job, PODS, running)
        if ctx.gang is not None:
            meta = ctx.job["metadata"]
            group = await self.kube.get(ctx.gang.resource, meta["name"], meta["namespace"])
            await self.writer.delete_owned(ctx.job, ctx.gang.resource, group)

    async def _suspend(self, ctx: _Pass, info: TrainJobInfo) -> None:
        live = [p for p in ctx.pods if not p["metadata"].get("deletionTimestamp")]
        obs = jobset.observe(info, [], int(ctx.status.get("restarts") or 0))
        ctx.status["jobsStatus"] = jobset.jobs_status(info, obs, suspended=True)
        ctx.status.pop("jobStartTimes", None)  # a resumed Job's deadline counts from its resumption
        if CONDITIONS.set(
            ctx.status,
            SUSPENDED,
            true=True,
            reason="Suspended",
            message="TrainJob is suspended",
            now=ctx.stamp,
        ):
            self.recorder.event(info.job, NORMAL, "Suspended", f"TrainJob {info.name} is suspended")
        await self.write_status(ctx)
        await self.writer.delete_all(info.job, PODS, live)

    def _deadline(self, ctx: _Pass) -> float | None:
        """Seconds left before ``spec.activeDeadlineSeconds`` (the clock restarts on every resume)."""
        limit = (ctx.job.get("spec") or {}).get("activeDeadlineSeconds")
        if not limit:
            return None
        resumed = cond.find(ctx.status, SUSPENDED)
        start = parse_time(
            resumed.get("lastTransitionTime")
            if resumed is not None and resumed.get("status") == "False"
            else ctx.job["metadata"].get("creationTimestamp")
        )
        return seconds_left(start, limit, ctx.now)

    def _ttl_result(self, ctx: _Pass) -> Result:
        ttl = (ctx.job["metadata"].get("annotations") or {}).get(naming.ANNOTATION_TTL_AFTER_FINISHED)
        finished = self._finished_at(ctx)
        if ttl is None or not ttl.isdigit() or finished is None:
            return Result()
        return Result(requeue_after=seconds_left(finished, ttl, ctx.now))

    # -- children --------------------------------------------------------------------------------------
    def _gang(self, info: TrainJobInfo) -> GangScheduler | None:
        return trainjob_gang(info.gang_policy, self.settings.gang)

    def _plugins(self, gang: GangScheduler | None) -> list[PodPlugin]:
        plugins: list[PodPlugin] = [CheckpointPlugin(), GpuPlugin(), LogTailPlugin()]
        if gang is not None:
            plugins.append(TrainJobGangPlugin(gang))
        if self.settings.status_server is not None:
            plugins.append(self.settings.status_server)
        return plugins

    async def _prepare(self, info: TrainJobInfo, gang: GangScheduler | None) -> None:
        """What must exist before pods: the headless Service, the ML policy's objects, the pod group.

        Each must be this TrainJob's: one of the same name owned by anything else fails the job."""
        service = self.services.get(f"{info.namespace}/{info.subdomain}")
        if service is None:
            tracked = SERVICES in self.tracked_children
            await self.writer.create_all(info.job, SERVICES, [jobset.build_service(info)], track=tracked)
        else:
            require_ours(info.job, SERVICES, service)
        if self.settings.status_server is not None:
            await sync_tls_config(self.kube, info.job, self.settings.status_server)
        for extra in info.extras:
            await self._ensure_extra(info, extra)
        if gang is not None:
            await self._ensure_pod_group(info, gang)

    async def _ensure_extra(self, info: TrainJobInfo, extra: Extra) -> None:
        """Create an object the pods need besides the Service (the MPI hostfile and SSH key, an output
        claim), or check that the one there is this TrainJob's (a claim it retained is kept as it is)."""
        try:
            existing = await self.kube.get(extra.resource, extra.name, info.namespace)
            if existing is None:
                body = extra.make()
                body["metadata"]["namespace"] = info.namespace
                await self.writer.create_all(info.job, extra.resource, [body], track=False)
            elif not (extra.retained and retained_claim_of(existing, info.name)):
                require_ours(info.job, extra.resource, existing)
        except errors.APIError as exc:
            if exc.status == 403 and extra.resource is SECRETS:
                raise errors.APIError(
                    403,
                    f"the controller may not create the MPI SSH key Secret {extra.name}: apply "
                    "deploy/extras/mpi-ssh-keys and bind it in this namespace (kubectl create rolebinding "
                    "kubetrain-mpi-ssh-keys --clusterrole=kubetrain-controller-mpi-ssh-keys "
                    f"--serviceaccount=<controller namespace>:kubetrain-controller -n {info.namespace})",
                ) from exc
            raise

    async def _ensure_pod_group(self, info: TrainJobInfo, gang: GangScheduler) -> None:
        """The gang scheduler's pod group for the TrainJob; a clear error when its CRD is missing."""
        try:
            await self.kube.create(gang.resource, gang.pod_group(info), info.namespace)
        except errors.APIConflictError:
            await check_existing(self.kube, info.job, gang.resource, info.name)
        except errors.APINotFoundError as exc:
            raise errors.APIError(
                404,
                f"the runtime's podGroupPolicy needs {gang.resource}; install its scheduler or run the "
                "controller with --gang-scheduler-name=kubernetes",
            ) from exc

    async def _copy_report(self, ctx: _Pass, info: TrainJobInfo, obs: jobset.Observation) -> None:
        """Copy rank 0's report from its pods, or else from a deleted one (``DepartedPods``).

        A pod being deleted still counts: the controller stops a failed job's pods, and rank 0 writes its
        report as it exits."""
        trainer = info.trainer()

        def report_of(departed: list[Obj]) -> dict[str, Any] | None:
            if trainer is None:
                return None
            rank0 = next((j for j in obs.jobs if j.pod_set is trainer and j.index == 0), None)
            candidates = [pod for pod in departed if jobset.is_rank0(pod, trainer)]
            if rank0 is not None:
                candidates += [
                    *rank0.failed_pods.get(0, []),
                    *([rank0.live[0]] if 0 in rank0.live else []),
                    *([rank0.terminating[0]] if 0 in rank0.terminating else []),
                ]
            report = None
            for pod in candidates:
                report = termination_report(pod, NODE) or report
            return report

        await self.copy_report(ctx, report_of)


def _record(status: Obj, info: TrainJobInfo, obs: jobset.Observation) -> None:
    """Write what the pass observed into the status: each child Job's counts and the bookkeeping the
    next pass reads back (failures, restarts counted, failed indexes, start times)."""
    status["jobsStatus"] = jobset.jobs_status(info, obs)
    status["jobFailures"] = obs.job_failures
    status["countedPodRestarts"] = obs.counted
    _set_or_drop(status, "failedIndexes", obs.failed_indexes)
    _set_or_drop(status, "jobStartTimes", obs.start_times)


def _fenced_pods(obs: jobset.Observation) -> list[str]:
    """The pods, live or failed, that were fenced off their checkpoint (a newer attempt writes it)."""
    return [
        p["metadata"]["name"]
        for j in obs.jobs
        for p in [*j.live.values(), *(f for fs in j.failed_pods.values() for f in fs)]
        if fenced_off(p)
    ]


def _set_or_drop(status: Obj, key: str, value: Obj) -> None:
    if value:
        status[key] = value
    else:
        status.pop(key, None)


def _framework_of(runtime: Obj) -> str:
    labels: dict[str, Any] = (runtime.get("metadata") or {}).get("labels") or {}
    return str(labels.get(naming.LABEL_TRAINER_FRAMEWORK) or "trainjob")


def _framework(info: TrainJobInfo | None) -> str:
    return "trainjob" if info is None else _framework_of(info.runtime)


def _replicas(pods: list[Obj]) -> list[tuple[str, int, Obj]]:
    """``(replicated job, completion index, pod)`` of the pods of the current attempt, for the diagnosis."""
    found = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        rjob, index = labels.get(naming.JOBSET_REPLICATED_JOB), labels.get(naming.JOB_COMPLETION_INDEX)
        if rjob and index and index.isdigit() and not pod["metadata"].get("deletionTimestamp"):
            found.append((rjob, int(index), pod))
    return sorted(found, key=lambda f: (f[0], f[1]))
