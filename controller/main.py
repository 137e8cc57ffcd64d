"""Wire the controller together and run it until SIGTERM.

One informer per job kind, shared informers for pods, services and pod
groups, one work queue and one set of workers per kind. Children map to their
job through the controller owner reference, so a pod event enqueues exactly
its job. Metrics and health probes are served from the start; the workers only
start once this replica leads (with ``--leader-elect``) and the caches have
synced. SIGTERM stops taking new keys, lets in-flight reconciles finish,
flushes queued events, releases the leader Lease and exits 0. A start that
fails or a Lease that is lost ends the run with an error (exit 1), never a
replica that looks healthy and does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubetrain import naming
from kubetrain.api.kinds import CLUSTER_TRAINING_RUNTIME, JOBS, TRAINING_RUNTIME, TRAINJOB
from kubetrain.api.objects import Obj
from kubetrain.controller import cached, metrics, preflight
from kubetrain.controller.core.skeleton import OWNER_INDEX, JobReconciler, Settings, Shared
from kubetrain.controller.options import Options, split_address
from kubetrain.controller.plugins.status_server import StatusServerPlugin
from kubetrain.controller.statusserver.server import StatusServer
from kubetrain.controller.trainjob.reconciler import TrainJobReconciler
from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.reconciler import V1JobReconciler
from kubetrain.kube import leader
from kubetrain.kube.client import KubeClient
from kubetrain.kube.events import EventRecorder
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.informer import Informer, controller_owner_uid
from kubetrain.kube.resources import CONFIGMAPS, CRDS, PODS, SERVICES, Resource
from kubetrain.kube.runner import Runner
from kubetrain.kube.workqueue import WorkQueue

log = logging.getLogger("kubetrain.controller")

V1_CHILD_SELECTOR = naming.LABEL_JOB_NAME  # "label exists": only pods and services of v1 jobs
TRAINJOB_CHILD_SELECTOR = naming.JOBSET_NAME  # and of TrainJobs
JOB_KINDS = frozenset(k.kind for k in JOBS)
# Connections to the API server: enough for the workers' requests in flight beside the watches; each
# holds a TLS read buffer, so the 100 of kubernetes_asyncio's default cost memory a burst never needs
# (docs/performance.md measures both).
API_CONNECTIONS = 64


@dataclass
class Manager:
    """Everything one controller process runs."""

    kube: KubeClient
    options: Options
    informers: list[Informer] = field(default_factory=list)
    runners: list[Runner] = field(default_factory=list)
    recorder: EventRecorder | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    status_server: web.AppRunner | None = None
    reports: StatusServer | None = None  # the status server, told of every deleted pod

    async def _installed(self, resource: Resource) -> bool:
        return await self.kube.get(CRDS, str(resource)) is not None  # the CRD's name: <plural>.<group>

    async def start(self) -> None:
        """Start informers, wait for them to sync, then start the workers."""
        options = self.options
        plugin = None
        if options.status_server_enabled:
            cert = options.status_server_cert()
            plugin = StatusServerPlugin(options.status_server_base_url(), cert.ca.decode())
            host, port = split_address(options.status_server_bind_address)
            # Its own rate budget: reports never queue the writes that run the jobs.
            self.reports = StatusServer(self.kube.with_own_budget(), cert)
            self.status_server = await self.reports.start(host, port)
            log.info(
                "status server listening on %s, reached at %s",
                options.status_server_bind_address,
                plugin.base_url,
            )
        settings = options.settings(plugin)
        await preflight.warn_about_webhooks(self.kube)
        self.recorder = EventRecorder(self.kube.with_own_budget(), "kubetrain-controller")
        self.recorder.start()
        indexes = {OWNER_INDEX: controller_owner_uid}
        common: dict[str, Any] = {"namespace": options.namespace, "watch_timeout": options.watch_timeout}
        pods = Informer(
            self.kube, PODS, label_selector=V1_CHILD_SELECTOR, indexes=indexes, transform=cached.pod, **common
        )
        services = Informer(
            self.kube,
            SERVICES,
            label_selector=V1_CHILD_SELECTOR,
            indexes=indexes,
            transform=cached.service,
            **common,
        )
        self.informers += [pods, services]
        self._tell_status_server(pods)
        pod_groups = None
        if settings.gang is not None:
            if not await self._installed(settings.gang.resource) and not settings.gang.builtin:
                raise SystemExit(
                    f"--gang-scheduler-name={options.gang_scheduler_name} needs the "
                    f"{settings.gang.resource} CRD; install the scheduler first"
                )
            pod_groups = Informer(
                self.kube, settings.gang.resource, indexes=indexes, transform=cached.stripped, **common
            )
            self.informers.append(pod_groups)
        for kind in options.kinds:
            if kind == TRAINJOB.kind:
                await self._start_trainjobs(settings, pod_groups, common)
                continue
            framework = frameworks.by_name(kind)
            resource = framework.api.resource
            if not await preflight.require_our_crd(self.kube, resource):
                log.warning("%s is not installed (no CRD %s); not reconciling it", kind, resource)
                continue
            jobs = Informer(self.kube, resource, transform=cached.stripped, **common)
            reconciler = V1JobReconciler(
                framework=framework, pod_groups=pod_groups, **self._shared(settings, jobs, pods, services)
            )
            self._serve(reconciler, jobs, pods, [c for c in (services, pod_groups) if c is not None])
            self.informers.append(jobs)
        for informer in self.informers:
            informer.start()
        await asyncio.gather(*(i.wait_synced() for i in self.informers))
        for runner in self.runners:
            runner.start()
        metrics.job_progress.add(self.cached_jobs)
        self.ready.set()
        log.info(
            "controller started: %s, %d workers each",
            ", ".join(r.name for r in self.runners),
            options.workers,
        )

    async def _start_trainjobs(
        self,
        settings: Settings,
        pod_groups: Informer | None,
        common: dict[str, Any],
    ) -> None:
        needed = (TRAINJOB.resource, TRAINING_RUNTIME.resource, CLUSTER_TRAINING_RUNTIME.resource)
        missing = [str(r) for r in needed if not await preflight.require_our_crd(self.kube, r)]
        if missing:
            log.warning("TrainJob is not installed (no CRD %s); not reconciling it", ", ".join(missing))
            return
        indexes = {OWNER_INDEX: controller_owner_uid}
        whole = {**common, "transform": cached.stripped}
        trainjobs = Informer(self.kube, TRAINJOB.resource, **whole)
        runtimes = Informer(self.kube, TRAINING_RUNTIME.resource, **whole)
        cluster_runtimes = Informer(
            self.kube,
            CLUSTER_TRAINING_RUNTIME.resource,
            watch_timeout=common["watch_timeout"],
            transform=cached.stripped,
        )
        snapshots = Informer(self.kube, CONFIGMAPS, label_selector=naming.TRAINJOB_RUNTIME_SNAPSHOT, **whole)
        owned = {**common, "label_selector": TRAINJOB_CHILD_SELECTOR}
        pods = Informer(self.kube, PODS, indexes=indexes, transform=cached.pod, **owned)
        self._tell_status_server(pods)
        services = Informer(self.kube, SERVICES, transform=cached.service, **owned)
        reconciler = TrainJobReconciler(
            runtimes=runtimes,
            cluster_runtimes=cluster_runtimes,
            snapshots=snapshots,
            **self._shared(settings, trainjobs, pods, services),
        )
        queue = self._serve(reconciler, trainjobs, pods, [services, snapshots])
        for informer in (runtimes, cluster_runtimes):
            informer.add_handler(reconciler.runtime_handler(queue.add))
        self.informers += [trainjobs, runtimes, cluster_runtimes, snapshots, pods, services]

    def _tell_status_server(self, pods: Informer) -> None:
        """A deleted pod's token stops being trusted from the status server's memory at once."""
        if self.reports is not None:
            pods.add_handler(self.reports.pod_changed)

    def _shared(self, settings: Settings, jobs: Informer, pods: Informer, services: Informer) -> Shared:
        """What a kind's reconciler is made with; its own expectations, as a PyTorchJob and a TFJob (or a
        TrainJob) may share a name."""
        assert self.recorder is not None
        return Shared(
            kube=self.kube,
            jobs=jobs,
            pods=pods,
            services=services,
            expectations=Expectations(),
            recorder=self.recorder,
            settings=settings,
        )

    def _serve(
        self, reconciler: JobReconciler, jobs: Informer, pods: Informer, children: list[Informer]
    ) -> WorkQueue:
        """Feed ``reconciler``'s queue from its jobs, pods and other children, and add its workers."""
        queue = WorkQueue(reconciler.name)
        jobs.add_handler(reconciler.job_handler(queue.add))
        pods.add_handler(reconciler.pod_handler(queue.add))
        for informer in children:
            informer.add_handler(reconciler.child_handler(queue.add, informer.resource))
        self.runners.append(
            Runner(reconciler.name, queue, reconciler.reconcile, workers=self.options.workers)
        )
        return queue

    def cached_jobs(self) -> list[Obj]:
        """Every job in this controller's caches (the training jobs, not their runtimes or children)."""
        return [job for i in self.informers if i.resource.kind in JOB_KINDS for job in i.objects()]

    async def stop(self) -> None:
        metrics.job_progress.remove(self.cached_jobs)
        if self.status_server is not None:
            await self.status_server.cleanup()
        await asyncio.gather(*(r.stop() for r in self.runners))
        await asyncio.gather(*(i.stop() for i in self.informers))
        if self.recorder is not None:
            await self.recorder.stop()


async def _serve(address: str, routes: list[web.RouteDef]) -> web.AppRunner:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = split_address(address)
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve_endpoints(options: Options, ready: Callable[[], bool]) -> list[web.AppRunner]:
    """``/metrics`` on the metrics address; ``/healthz`` and ``/readyz`` on the probe address."""

    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if ready() else web.Response(status=503, text="caches not synced")

    runners = []
    if options.metrics_bind_address not in ("", "0"):
        runners.append(await _serve(options.metrics_bind_address, [web.get("/metrics", metrics_handler)]))
    if options.health_probe_bind_address not in ("", "0"):
        runners.append(
            await _serve(
                options.health_probe_bind_address, [web.get("/healthz", healthz), web.get("/readyz", readyz)]
            )
        )
    return runners


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    _standard = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in self._standard})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(options: Options) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if options.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(options.log_level.upper())


class StartError(Exception):
    """The controller could not start (a missing prerequisite it reported and gave up on)."""


async def run(options: Options, *, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (or SIGTERM/SIGINT arrives).

    Raises when the controller cannot go on, so the command exits 1 and Kubernetes restarts it:
    when starting fails (an API error, a missing prerequisite) and, with ``--leader-elect``, when the
    Lease is lost (``leader.LeadershipLostError``). Either way the manager is stopped first, and a Lease
    still held is released (also on a clean stop) so a follower takes over at once.
    """
    options.settings()  # validate flags before touching the cluster
    metrics.install()  # the Kubernetes runtime reports into /metrics
    timings = options.leader_timings()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    kube = await KubeClient.from_kubeconfig(
        options.kubeconfig,
        qps=options.kube_api_qps,
        burst=options.kube_api_burst,
        connections=API_CONNECTIONS,
    )
    manager = Manager(kube, options)
    endpoints = await serve_endpoints(options, manager.ready.is_set)
    elector: leader.LeaderElector | None = None
    try:
        if not options.leader_elect:
            await supervise(manager, stop, None)
            return
        elector = await leader.connect(
            options.kubeconfig,
            name=options.leader_election_id,
            namespace=options.leader_election_namespace,
            timings=timings,
        )
        kube.write_guard = elector.fence
        if not await _unless_stopped(elector.acquire(), stop):
            return
        async with leader.leadership(elector):
            await supervise(manager, stop, elector)
    finally:
        if elector is not None:
            await elector.close()
        for runner in endpoints:
            await runner.cleanup()
        await kube.close()


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await ``work`` unless ``stop`` comes first (then cancel it); True when ``work`` finished."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (task, stopped):
            waiting.cancel()
        await asyncio.gather(task, stopped, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # raises what ``work`` raised
    return True


async def supervise(manager: Manager, stop: asyncio.Event, elector: leader.LeaderElector | None) -> None:
    """Start the manager and run it until ``stop``; stop it on the way out, whatever happened.

    This is the supervision the leading work needs: a start that raises, or a Lease lost while
    starting or running, ends the run with that error instead of leaving a replica that holds the
    Lease (or looks healthy) and reconciles nothing.
    """
    starting = asyncio.create_task(_start(manager), name="manager-start")
    watched: set[asyncio.Future[Any]] = {starting, asyncio.create_task(stop.wait())}
    if elector is not None:
        watched.add(asyncio.create_task(elector.lost.wait()))
    try:
        while True:
            if elector is not None and elector.lost.is_set():
                raise leader.LeadershipLostError(elector.lost_reason)
            if stop.is_set():
                return
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if starting in done:
                starting.result()  # raises what start raised
                watched.discard(starting)
    finally:
        for task in watched:
            task.cancel()
        await asyncio.gather(*watched, return_exceptions=True)
        log.info("shutting down: finishing in-flight reconciles")
        await manager.stop()


async def _start(manager: Manager) -> None:
    try:
        await manager.start()
    except SystemExit as exc:  # a prerequisite check gave up; an exception a task can carry
        raise StartError(str(exc.code)) from None
