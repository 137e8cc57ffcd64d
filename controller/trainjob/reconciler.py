"""Reconcile a TrainJob (trainer.kubeflow.org/v1alpha1) straight into pods.

Upstream writes a JobSet and leaves the pods to two more controllers; kubetrain
creates the pods itself (``trainjob.jobset`` holds the JobSet and Job
semantics), which is one controller to run, one cache to keep, and no lag
between three reconcile loops. A pass, level-triggered, reading caches:

1. observe: skip TrainJobs another controller manages or that are being
   deleted (``JobReconciler.reconcile``); resolve the runtime, from the snapshot
   ConfigMap ``<tj>-runtime-snapshot`` once it exists (so editing or deleting a
   runtime never changes a running job), else from the live runtime, which is
   then snapshotted; build the pod sets (``kubetrain.trainjob.build``);
2. decide: ``trainjob.decisions.decide``, pure;
3. carry the ``Decision`` out, in this order: rank 0's report is copied and
   the Events recorded; a TrainJob that finishes has its terminal status
   written before anything is cleaned up (``JobReconciler.finish``, as for
   every kind); pods to restart or of an earlier attempt go after the status
   that says so; what the pods need (the headless Service, the ML policy's
   objects, the pod group) is made before they are created, alongside the
   status write; a finished TrainJob is cleaned up, and deleted once its TTL
   has passed. Timed requeues make TTLs and deadlines happen on time.

A child the API server will not take (a name held by another owner, a pod
template it rejects pass after pass) fails the TrainJob with the API server's
message (``trainjob.decisions.on_rejection``).

docs/trainjob.md describes the behaviour for users.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Unpack

import yaml

from kubetrain import naming
from kubetrain.api import v2
from kubetrain.api.kinds import CLUSTER_TRAINING_RUNTIME, RUNTIMES, TRAINING_RUNTIME, TRAINJOB
from kubetrain.api.objects import JobIdentity, Obj
from kubetrain.controller.core.conditions import DELETION_HELD
from kubetrain.controller.core.skeleton import OWNER_INDEX, JobReconciler, Pass, Shared
from kubetrain.controller.core.tls_config import sync_tls_config
from kubetrain.controller.core.writes import (
    ChildRejectedError,
    Ownership,
    check_existing,
    ownership,
    raise_first_failure,
    require_ours,
)
from kubetrain.controller.plugins.gang import GangScheduler
from kubetrain.controller.trainjob import jobset
from kubetrain.controller.trainjob.decisions import (
    BUILD_ERROR,
    CONDITIONS,
    RUNTIME_NOT_FOUND,
    RUNTIME_NOT_SUPPORTED,
    Decision,
    Expiry,
    Observed,
    Phase,
    Setup,
    Unbuilt,
    decide,
    framework_of,
    on_rejection,
)
from kubetrain.kube import errors
from kubetrain.kube.events import NORMAL, WARNING
from kubetrain.kube.informer import Handler, Informer
from kubetrain.kube.resources import CONFIGMAPS, PODS, PVCS, SECRETS, SERVICES
from kubetrain.kube.runner import Result, RetryLaterError
from kubetrain.trainjob.build import build, retained_claim_of
from kubetrain.trainjob.state import BuildError, Extra, TrainJobInfo

log = logging.getLogger("kubetrain.controller")


def snapshot_name(trainjob: str) -> str:
    return f"{trainjob}-runtime-snapshot"


class TrainJobReconciler(JobReconciler):
    name = "trainjob"
    resource = TRAINJOB.resource
    conditions = CONDITIONS
    finish_words = ("trainjob", "complete")

    def __init__(
        self, *, runtimes: Informer, cluster_runtimes: Informer, snapshots: Informer, **shared: Unpack[Shared]
    ) -> None:
        super().__init__(**shared)
        self.runtimes = runtimes
        self.cluster_runtimes = cluster_runtimes
        self.snapshots = snapshots
        self.setup = Setup(self.settings.gang, self.settings.status_server)
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
        now = self.clock()
        pods = self.pods.by_index(OWNER_INDEX, job["metadata"]["uid"])
        if CONDITIONS.is_finished(cached.get("status") or {}):
            observed = Observed(pods, info=self._snapshot_info(job))
        else:
            observed = await self._observe(key, job, pods)
        departed = self.departed.take(key)
        try:
            d = decide(job, replace(observed, departed=departed), now, self.setup)
        except BaseException:
            self.departed.restore(key, departed)
            raise
        ctx = Pass(job, d.status, copy.deepcopy(cached.get("status") or {}), now)
        if d.copies_report:
            await self.copy_report(ctx, d.report, departed)
        else:
            self.departed.restore(key, departed)
        self._record(ctx, d)
        if d.phase is Phase.FINISHED:
            return await self._finished(ctx, d)
        try:
            result = await self._unfinished(ctx, d)
        except ChildRejectedError as rejected:
            return await self._rejected(ctx, d, rejected)
        self.rejections.forget(key)
        return result

    # -- observing -------------------------------------------------------------------------------------
    async def _observe(self, key: str, job: Obj, pods: list[Obj]) -> Observed:
        """An unfinished TrainJob built against the snapshot of its runtime, which is taken from the live
        runtime on first sight; or why it has no build."""
        meta = job["metadata"]
        snapshot = self.snapshots.get(f"{meta['namespace']}/{snapshot_name(meta['name'])}")
        found = snapshot is None
        try:
            if snapshot is not None:
                require_ours(job, CONFIGMAPS, snapshot)
                runtime = self._snapshot_runtime(key, snapshot)
            else:
                live = self._live_runtime(job)
                if isinstance(live, Unbuilt):
                    return Observed(pods, unbuilt=live)
                runtime = live
                await self._take_snapshot(job, runtime)
        except ChildRejectedError as rejected:
            # Only a snapshot's name held by someone else: it fails the TrainJob at once.
            if not self.rejections.fails_job(key, rejected):
                raise RetryLaterError(str(rejected)) from rejected
            return Observed(pods, unbuilt=Unbuilt(rejected.reason, str(rejected)), runtime_found=found)
        try:
            return Observed(pods, info=build(job, runtime), runtime_found=found)
        except BuildError as exc:
            return Observed(pods, unbuilt=Unbuilt(BUILD_ERROR, str(exc)), runtime_found=found)

    def _live_runtime(self, job: Obj) -> Obj | Unbuilt:
        """The runtime ``spec.runtimeRef`` names, as its snapshot keeps it; or why there is none."""
        meta = job["metadata"]
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        group = ref.get("apiGroup") or v2.GROUP
        kind = ref.get("kind") or CLUSTER_TRAINING_RUNTIME.kind
        if group != v2.GROUP or kind not in (k.kind for k in RUNTIMES):
            return Unbuilt(RUNTIME_NOT_SUPPORTED, f"unsupported runtime: {kind}.{group}")
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
            return Unbuilt(RUNTIME_NOT_FOUND, message)
        return {
            "apiVersion": v2.API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "labels": dict(live["metadata"].get("labels") or {})},
            "spec": live.get("spec") or {},
        }

    async def _take_snapshot(self, job: Obj, runtime: Obj) -> None:
        """Keep the runtime in the ConfigMap ``<tj>-runtime-snapshot``, which the TrainJob owns."""
        meta = job["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": snapshot_name(meta["name"]),
                "namespace": meta["namespace"],
                "labels": {naming.TRAINJOB_RUNTIME_SNAPSHOT: meta["name"]},
                "ownerReferences": [JobIdentity(job).owner_reference()],
            },
            "data": {"runtime": yaml.safe_dump(runtime, sort_keys=False)},
        }
        try:
            created = await self.kube.create(CONFIGMAPS, body, meta["namespace"])
            self.snapshots.observe_write(created)
            self.count(meta["namespace"], "created", framework_of(runtime))
            kind, name = runtime["kind"], runtime["metadata"]["name"]
            self.recorder.event(job, NORMAL, "TrainJobCreated", f"TrainJob {meta['name']} uses {kind} {name}")
        except errors.APIConflictError:
            # An earlier pass took it (it holds the same runtime), or the name is someone else's.
            await check_existing(self.kube, job, CONFIGMAPS, snapshot_name(meta["name"]))

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

    def _snapshot_info(self, job: Obj) -> TrainJobInfo | None:
        """The build of a finished TrainJob from its own runtime snapshot, if it has one that builds."""
        meta = job["metadata"]
        snapshot = self.snapshots.get(f"{meta['namespace']}/{snapshot_name(meta['name'])}")
        if snapshot is None or ownership(snapshot, job) is not Ownership.OURS:
            return None
        try:
            return build(job, self._snapshot_runtime(f"{meta['namespace']}/{meta['name']}", snapshot))
        except BuildError:
            return None

    # -- carrying a decision out -----------------------------------------------------------------------
    def _record(self, ctx: Pass, d: Decision) -> None:
        for event in d.events:
            self.recorder.event(ctx.job, event.type, event.reason, event.message)
        for counter, n in d.counters:
            self.count(ctx.namespace, counter, d.framework, n)

    async def _unfinished(self, ctx: Pass, d: Decision) -> Result:
        if d.phase is Phase.UNRESOLVED:
            await self.write_status(ctx)
            return Result(d.requeue_after)
        if d.phase is Phase.FINISHING:
            await self._finish(ctx, d)
            return Result(d.requeue_after)
        if d.phase in (Phase.SUSPENDED, Phase.REPLACING):
            if d.restart is not None:
                log.info(
                    "trainjob %s restarting (attempt %d): %s", ctx.key, d.restart.attempt, d.restart.message
                )
            await self.write_status(ctx)
            await self.writer.delete_all(ctx.job, PODS, d.delete_pods)
            return Result(d.requeue_after)
        return await self._run(ctx, d)

    async def _run(self, ctx: Pass, d: Decision) -> Result:
        """Create the pods whose time has come alongside the status write (what they need first)."""
        assert d.info is not None
        if d.create_pods:
            await self._prepare(d.info, d.gang)
        outcomes = await asyncio.gather(
            self.writer.create_all(ctx.job, PODS, d.create_pods, track=True),
            self.write_status(ctx),
            return_exceptions=True,
        )
        raise_first_failure(outcomes)
        created = d.after_creates()
        if created != ctx.status:
            ctx.status = created
            await self.write_status(ctx)
        for warning in dict.fromkeys(d.info.warnings):
            self.recorder.event(ctx.job, WARNING, "PodTemplateOverridden", warning)
        if d.create_pods:
            log.info("trainjob %s: created %d pods", ctx.key, len(d.create_pods))
        return Result(d.requeue_after)

    async def _finish(self, ctx: Pass, d: Decision) -> None:
        """Write the terminal status, then clean up (``JobReconciler.finish``)."""
        assert d.finish is not None
        await self.finish(ctx, d.finish, d.framework, lambda: self._cleanup(ctx, d))

    async def _rejected(self, ctx: Pass, d: Decision, rejected: ChildRejectedError) -> Result:
        """A child the API server will not take: fail the TrainJob, or say why while trying again."""

        def decided(fails: bool) -> Decision:
            return on_rejection(d, ctx.status, rejected.reason, str(rejected), fails_job=fails)

        return await self.reject(ctx, rejected, decided, self._finish)

    async def _finished(self, ctx: Pass, d: Decision) -> Result:
        """A finished TrainJob: what the runtime's TTL deletes, cleanup, the status, and its deletion
        once its own TTL has passed (unless the decision holds it)."""
        if d.expiry is not None:
            await self._expire(ctx, d.expiry)
        await self._cleanup(ctx, d)
        if d.deletion_held is not None:
            self.recorder.event(ctx.job, WARNING, DELETION_HELD, d.deletion_held)
            log.info("trainjob %s: deletion held: %s", ctx.key, d.deletion_held)
        await self.write_status(ctx)
        if d.delete_job:
            await self.delete_expired(ctx, d.framework, f"Deleted TrainJob {ctx.name} (TTL)")
            return Result()
        return Result(d.requeue_after)

    async def _expire(self, ctx: Pass, expiry: Expiry) -> None:
        """Delete what the runtime's ``ttlSecondsAfterFinished`` takes: pods, Service, owned claims."""
        await self.writer.delete_all(ctx.job, PODS, expiry.pods)
        await self.writer.delete_owned(
            ctx.job, SERVICES, self.services.get(f"{ctx.namespace}/{expiry.service}")
        )
        for name in expiry.claims:
            claim = await self.kube.get(PVCS, name, ctx.namespace)
            await self.writer.delete_owned(ctx.job, PVCS, claim)

    async def _cleanup(self, ctx: Pass, d: Decision) -> None:
        """Delete the pods that still run (finished pods stay, for their logs) and the pod group."""
        await self.writer.delete_all(ctx.job, PODS, d.cleanup_pods)
        if d.gang is not None:
            group = await self.kube.get(d.gang.resource, ctx.name, ctx.namespace)
            await self.writer.delete_owned(ctx.job, d.gang.resource, group)

    # -- children --------------------------------------------------------------------------------------
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
