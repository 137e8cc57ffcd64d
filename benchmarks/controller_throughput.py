"""Controller throughput: J PyTorchJobs of 1 Master + W Workers submitted at once, on kwok GPU nodes.

Side by side on one dev cluster, each configuration starting on a quiet cluster (the namespace of the
run before it gone):

* a bare parallel creator that writes the same pods and services with no controller logic at all (the
  floor any controller pays to the API server and kwok);
* the same creator writing each job object too, just before its children (what the API server spends
  on the jobs themselves, which the users of any operator pay: a job's create costs it three to four
  pod creates);
* the upstream Go operator, training-operator v1.8.1 (``go install``-ed into the binary cache on first
  use), whose client budget controller-runtime fixes at QPS 20 / burst 30;
* kubetrain's controller at that budget with the upstream operator's 8 workers, and unlimited with its
  default workers.

Measured: per-job latency from submit to all of its pods created (p50, p95); makespan from the first
submit to every job Succeeded (bare: every pod Succeeded); the operator's CPU seconds, peak RSS, RSS
against pods created, its API requests per job by verb and its reconcile passes per job, read from
its own metrics (``kubetrain_kube_api_requests_total`` and ``kubetrain_reconcile_total``, client-go's
``rest_client_requests_total`` and controller-runtime's ``controller_runtime_reconcile_total``); and the CPU
seconds of every process on the machine during each run (the cluster's components, the submitter,
the operator), which on a machine of few cores is what the makespan ratio follows, and from the
first submit until 95% of the jobs have all their pods, the window the p95 create latency measures.

Usage: python benchmarks/controller_throughput.py [--jobs 50 --jobs 300] [--workers 3] [--rounds 3]
Sizes also come from $KUBETRAIN_BENCH_JOBS (comma-separated: 50,300,2000). With ``--rounds N`` every
size is measured N times over, each round the bare creator and then every configuration; the report
gives each figure's median over the rounds, and each ratio is taken within its round (a run against the
bare creator's run just before it) with its range: on a machine of few cores one run's p95 moves by a
third from one round to the next, and a cluster grows slower as it ages.
Results go to benchmarks/results/controller_throughput.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kubetrain import naming
from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.controller import cached
from kubetrain.devcluster import build, certs
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.devcluster.process import free_port
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import (
    NAMESPACES,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    VALIDATING_WEBHOOKS,
    Resource,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: tests.support has the controller's command line

from least_controller import STARTED as LEAST_STARTED  # noqa: E402
from least_controller import children  # noqa: E402

from tests.support import controller_command  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
RUN_FOR = "3s"
THREADS = 8  # reconcile workers of every operator at the upstream operator's budget
UPSTREAM_NAMESPACE = "kubeflow"
UPSTREAM_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # fixed by the upstream operator
SIZES_ENV = "KUBETRAIN_BENCH_JOBS"
UPSTREAM_QPS, UPSTREAM_BURST = 20.0, 30  # what controller-runtime gives the upstream operator
console = Console()


@dataclass
class Run:
    """One measured configuration."""

    name: str
    jobs: int
    pods_per_job: int
    round: int = 0  # which of the size's rounds (``--rounds``) it belongs to
    latencies: list[float] = field(default_factory=list)
    makespan: float = 0.0
    cpu_seconds: float | None = None
    peak_rss_mib: float | None = None
    requests: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # requests refused, by verb and code
    passes: int | None = None  # the operator's reconciles of the run (its own reconcile counter)
    qps: float | None = None  # the client-side budget: the floor is children to create / qps
    rss_by_pods: list[tuple[int, float]] = field(default_factory=list)  # (pods created, RSS MiB)
    cache_mib: dict[str, float] = field(default_factory=dict)  # the children's cache, by what it keeps
    cpu_by_process: dict[str, float] = field(default_factory=dict)  # CPU seconds during the run
    burst: dict[str, float] = field(default_factory=dict)  # the same, in the p95 window (``Burst``)
    burst_seconds: float = 0.0  # how long that window was

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[percentile_index(q, len(ordered))] if ordered else float("nan")


def percentile_index(q: float, n: int) -> int:
    """Where the ``q`` quantile of ``n`` sorted figures stands."""
    return min(n - 1, int(q * n))


def manifest(name: str, workers: int) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": {"sim.kubetrain.dev/run-duration": RUN_FOR}},
                "spec": {
                    "tolerations": [dict(naming.GPU_TOLERATION)],  # the upstream operator adds none
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "example.com/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


async def _drop_namespace(kube: KubeClient, name: str) -> None:
    """Delete a run's namespace and wait until it is gone, so the next run starts on a quiet cluster
    (one started while thousands of pods are still being deleted takes far longer)."""
    await kube.delete(NAMESPACES, name)
    while await kube.get(NAMESPACES, name) is not None:
        await asyncio.sleep(1)


async def _namespace(kube: KubeClient, name: str) -> None:
    await kube.create(NAMESPACES, {"metadata": {"name": name}})
    for _ in range(100):
        if await kube.get(SERVICE_ACCOUNTS, "default", name):
            return
        await asyncio.sleep(0.1)


class PodClock:
    """Watches pods of a namespace; records when each job's pods were all created and when they all succeeded."""

    def __init__(self, kube: KubeClient, namespace: str, pods_per_job: int) -> None:
        self.informer = Informer(kube, PODS, namespace=namespace)
        self.pods_per_job = pods_per_job
        self.created: dict[str, set[str]] = {}
        self.all_created: dict[str, float] = {}
        self.succeeded: set[str] = set()
        self.last_success = 0.0
        self.on_job_created: Callable[[int], None] = lambda created: None  # jobs with every pod so far
        self.informer.add_handler(self._seen)

    def _seen(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        name = new["metadata"]["name"]
        job = name.rsplit("-", 2)[0]
        pods = self.created.setdefault(job, set())
        pods.add(name)
        if len(pods) == self.pods_per_job and job not in self.all_created:
            self.all_created[job] = time.monotonic()
            self.on_job_created(len(self.all_created))
        if new.get("status", {}).get("phase") == "Succeeded" and name not in self.succeeded:
            self.succeeded.add(name)
            self.last_success = time.monotonic()


class SuccessClock:
    """Watches the jobs of a run through their informer's events: when the last of them succeeded
    (the benchmark scans nothing while the operator works, so it spends no CPU the operator lacks)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.succeeded: set[str] = set()
        self.last = 0.0
        self.all = asyncio.Event()

    def seen(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        conditions = (new.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions):
            name = new["metadata"]["name"]
            if name not in self.succeeded:
                self.succeeded.add(name)
                self.last = time.monotonic()
                if len(self.succeeded) == self.jobs:
                    self.all.set()


BARE = "bare parallel creator"
BARE_WITH_JOBS = "bare creator + job objects"
LEAST = "least controller (watch, then create)"


async def run_baseline(
    kube: KubeClient, jobs: int, workers: int, cluster: dict[str, int], *, with_jobs: bool = False
) -> Run:
    """Create every pod and service directly, as fast as possible, and wait for the pods to succeed.

    ``with_jobs``: each job object as well, just before its children, with no controller to act on
    it: the API server's share of a job that any operator's users pay (its create is the dearest
    request of the run), and no controller's."""
    namespace = f"bench-bare-{jobs}x{workers + 1}-{int(time.time())}"
    await _namespace(kube, namespace)
    result = Run(BARE_WITH_JOBS if with_jobs else BARE, jobs, workers + 1)
    clock = PodClock(kube, namespace, workers + 1)
    clock.informer.start()
    await clock.informer.wait_synced()
    objects: list[tuple[Resource, dict[str, Any]]] = []
    for j in range(jobs):
        name = f"job-{j:04d}"
        if with_jobs:  # an object of its own: the children's build below may fill in defaults
            objects.append((PYTORCHJOB.resource, manifest(name, workers)))
        body = manifest(name, workers)
        body["metadata"].update({"namespace": namespace, "uid": "none"})
        for resource, obj in children(body):  # the same pods and services the controller writes
            obj["metadata"].pop("ownerReferences")
            objects.append((resource, obj))
    limit = asyncio.Semaphore(64)
    meter = CpuMeter(cluster)
    meter.start()
    burst = Burst(meter, jobs, clock)
    started = time.monotonic()
    submitted = {f"job-{j:04d}": started for j in range(jobs)}

    async def create(resource: Resource, obj: dict[str, Any]) -> None:
        async with limit:
            await kube.create(resource, obj, namespace)

    await asyncio.gather(*(create(r, o) for r, o in objects))
    result.requests = {"POST": len(objects)}
    total = jobs * (workers + 1)
    while len(clock.succeeded) < total:
        await asyncio.sleep(0.05)
    result.makespan = clock.last_success - started
    result.cpu_by_process = meter.stop()
    result.burst, result.burst_seconds = burst.cpu, burst.seconds
    result.latencies = [clock.all_created[j] - submitted[j] for j in submitted]
    await clock.informer.stop()
    if not with_jobs:  # the same children: measured once
        result.cache_mib = await cache_footprint(kube, namespace)
    await _drop_namespace(kube, namespace)
    return result


async def cache_footprint(kube: KubeClient, namespace: str) -> dict[str, float]:
    """MiB that the controller's pod and service caches hold for this namespace's children, with
    every object as the API server sends it and as the controller keeps it (``tracemalloc``)."""
    footprint: dict[str, float] = {}
    for resource, keep in ((PODS, cached.pod), (SERVICES, cached.service)):
        for label, transform in (("as sent", None), ("as cached", keep)):
            informer = Informer(kube, resource, namespace=namespace, transform=transform)
            tracemalloc.start()
            task = informer.start()
            await informer.wait_synced()
            size, _ = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            await informer.stop()
            footprint[f"{resource.plural} {label}"] = round(size / 2**20, 1)
            del task, informer
    return footprint


@dataclass(frozen=True)
class Operator:
    """A controller under test: how to start it on one namespace, and how it counts its API requests."""

    name: str
    argv: Callable[[str, int], list[str]]  # (namespace, metrics port) -> the command
    started: str  # a line of its log that says its workers run
    requests_metric: str  # its client's request counter
    verb_label: str
    passes_metric: str  # its reconcile counter (by controller and result)
    qps: float | None  # its client-side budget (None: unlimited)


def kubetrain_operator(qps: float, burst: int, workers: int | None) -> Operator:
    """kubetrain's controller at ``qps`` (0: unlimited), with ``workers`` (None: its default)."""

    def argv(namespace: str, port: int) -> list[str]:
        threads = ["--workers", str(workers)] if workers is not None else []
        return controller_command(
            namespace,
            *threads,
            "--kube-api-qps",
            str(qps),
            "--kube-api-burst",
            str(burst),
            metrics_address=f"127.0.0.1:{port}",
        )

    budget = f"qps {qps:g}, burst {burst}" if qps > 0 else "unlimited"
    return Operator(
        f"kubetrain ({budget})",
        argv,
        "controller started",
        "kubetrain_kube_api_requests_total",
        "verb",
        "kubetrain_reconcile_total",
        qps if qps > 0 else None,
    )


def upstream_operator() -> Operator:
    """training-operator v1.8.1; controller-runtime fixes its client at QPS 20, burst 30."""
    binary = build.upstream_operator(console)

    def argv(namespace: str, port: int) -> list[str]:
        return [
            str(binary),
            "--namespace",
            namespace,
            "--enable-scheme",
            "pytorchjob",
            "--controller-threads",
            str(THREADS),
            "--metrics-bind-address",
            f"127.0.0.1:{port}",
            "--health-probe-bind-address",
            f"127.0.0.1:{free_port()}",
            "--webhook-server-port",
            str(free_port()),
        ]

    version = build.UPSTREAM_TRAINING_OPERATOR[1]
    return Operator(
        f"upstream training-operator {version} (Go; qps 20, burst 30)",
        argv,
        "Starting workers",
        "rest_client_requests_total",
        "method",
        "controller_runtime_reconcile_total",
        20.0,
    )


async def prepare_upstream(kube: KubeClient) -> None:
    """What the upstream operator needs before it starts workers, with no kubelet to mount its cert
    Secret: its namespace, the Secret and webhook configuration its cert rotator fills, and a real
    certificate in the directory it serves the webhook from (it exits on anything but PEM)."""
    for resource, body, namespace in (
        (NAMESPACES, {"metadata": {"name": UPSTREAM_NAMESPACE}}, None),
        (SECRETS, {"metadata": {"name": "training-operator-webhook-cert"}}, UPSTREAM_NAMESPACE),
        (VALIDATING_WEBHOOKS, {"metadata": {"name": "validator.training-operator.kubeflow.org"}}, None),
    ):
        with contextlib.suppress(errors.APIConflictError):
            await kube.create(resource, body, namespace)
    UPSTREAM_CERT_DIR.mkdir(parents=True, exist_ok=True)
    certs.write_self_signed(
        name="training-operator",
        cert_path=UPSTREAM_CERT_DIR / "tls.crt",
        key_path=UPSTREAM_CERT_DIR / "tls.key",
    )


def _label(labels: str, name: str) -> str:
    found = re.search(f'[{{,]{name}="([^"]*)"', labels)
    return found.group(1) if found else ""


def _scrape(port: int, operator: Operator) -> Counts:
    """The operator's API requests so far: by verb (its watches and lists are GETs), and those the API
    server refused by verb and code (``PATCH 409``); and its reconciles."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    counts = Counts()
    for line in text.splitlines():
        if line.startswith(operator.requests_metric + "{"):
            labels, value = line.rsplit(" ", 1)
            verb, code, n = _label(labels, operator.verb_label), _label(labels, "code"), int(float(value))
            counts.requests[verb] = counts.requests.get(verb, 0) + n
            if not code.startswith("2"):
                counts.refused[f"{verb} {code}"] = counts.refused.get(f"{verb} {code}", 0) + n
        elif line.startswith(operator.passes_metric + "{"):
            counts.passes += int(float(line.rsplit(" ", 1)[1]))
    return counts


@dataclass
class Counts:
    """What an operator's own metrics count: API requests, refused requests, reconcile passes."""

    requests: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    passes: int = 0

    def since(self, start: Counts) -> Counts:
        def minus(now: dict[str, int], then: dict[str, int]) -> dict[str, int]:
            return {k: n - then.get(k, 0) for k, n in now.items() if n - then.get(k, 0)}

        return Counts(
            minus(self.requests, start.requests),
            minus(self.refused, start.refused),
            self.passes - start.passes,
        )


def _proc_stats(pid: int) -> tuple[float, float, float]:
    """CPU seconds (user + system), RSS and peak RSS in MiB of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return cpu, int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


class CpuMeter:
    """CPU seconds each process on the machine spends from ``start`` to ``stop``: the dev cluster's
    components, this process (the submitter and its watches) and the operator. On a machine of few
    cores they share the CPU, so what the operator and the API server it keeps busy spend is time
    the API server, the scheduler and kwok do not have for the pods: the makespan ratio follows it."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._at_start: dict[str, float] = {}

    def read(self) -> dict[str, float]:
        """CPU seconds each process has spent so far."""
        now = {"benchmark": time.process_time()}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):  # a component that is not running (kueue) spends nothing
                now[name] = _proc_stats(pid)[0]
        return now

    def start(self) -> None:
        self._at_start = self.read()

    def stop(self) -> dict[str, float]:
        return _since(self._at_start, self.read())


def _since(then: dict[str, float], now: dict[str, float]) -> dict[str, float]:
    return {name: cpu - then[name] for name, cpu in now.items() if name in then}


class Burst:
    """The CPU seconds every process spends from the first submit until 95% of the jobs have all
    their pods: the window the p95 create latency measures, when the children, the jobs and the
    operator share the cores (on a machine of few cores the p95 follows the CPU spent in it)."""

    def __init__(self, meter: CpuMeter, jobs: int, clock: PodClock) -> None:
        """Open the window now, just before the first submit; ``clock`` closes it."""
        self.meter = meter
        self.rank = percentile_index(0.95, jobs) + 1  # jobs with all their pods when the window ends
        self._at_submit, self._submitted = meter.read(), time.monotonic()
        self.cpu: dict[str, float] = {}
        self.seconds = 0.0
        clock.on_job_created = self.jobs_created

    def jobs_created(self, created: int) -> None:
        if created == self.rank:
            self.cpu = _since(self._at_submit, self.meter.read())
            self.seconds = time.monotonic() - self._submitted


async def start_operator(
    operator: Operator, kubeconfig: Path, namespace: str, port: int
) -> subprocess.Popen[bytes]:
    """Start the operator on ``namespace``; return once its log says its workers run."""
    log = Path(tempfile.gettempdir()) / f"{namespace}.log"
    proc = subprocess.Popen(
        operator.argv(namespace, port),
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        if operator.started in log.read_text() or proc.poll() is not None:
            break
        await asyncio.sleep(0.1)
    if operator.started not in log.read_text():
        proc.terminate()
        proc.wait(30)
        raise RuntimeError(f"{operator.name} did not start; its log ({log}) ends:\n{log.read_text()[-3000:]}")
    return proc


async def run_operator(
    kube: KubeClient, kubeconfig: Path, operator: Operator, jobs: int, workers: int, cluster: dict[str, int]
) -> Run:
    namespace = f"bench-{operator.name.split()[0].lower()}-{jobs}x{workers + 1}-{int(time.time())}"
    await _namespace(kube, namespace)
    result = Run(operator.name, jobs, workers + 1, qps=operator.qps)
    port = free_port()
    proc = await start_operator(operator, kubeconfig, namespace, port)
    try:
        meter = CpuMeter({**cluster, "operator": proc.pid})
        meter.start()  # the operator's start-up (imports, cache sync) is not throughput
        at_start = _scrape(port, operator)
        clock = PodClock(kube, namespace, workers + 1)
        clock.informer.start()
        await clock.informer.wait_synced()
        jobs_informer = Informer(kube, PYTORCHJOB.resource, namespace=namespace)
        succeeded = SuccessClock(jobs)
        jobs_informer.add_handler(succeeded.seen)
        jobs_informer.start()
        await jobs_informer.wait_synced()
        limit = asyncio.Semaphore(64)
        submitted: dict[str, float] = {}

        async def submit(j: int) -> None:
            name = f"job-{j:04d}"
            async with limit:
                submitted[name] = time.monotonic()
                await kube.create(PYTORCHJOB.resource, manifest(name, workers), namespace)

        async def sample_memory() -> None:
            while True:
                _, rss, _ = _proc_stats(proc.pid)
                result.rss_by_pods.append((sum(len(p) for p in clock.created.values()), rss))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample_memory())
        burst = Burst(meter, jobs, clock)
        started = time.monotonic()
        await asyncio.gather(*(submit(j) for j in range(jobs)))
        await succeeded.all.wait()
        result.makespan = succeeded.last - started
        sampler.cancel()
        result.latencies = [clock.all_created[j] - submitted[j] for j in submitted]
        _, _, result.peak_rss_mib = _proc_stats(proc.pid)
        result.cpu_by_process = meter.stop()
        result.burst, result.burst_seconds = burst.cpu, burst.seconds
        result.cpu_seconds = result.cpu_by_process["operator"]
        counts = _scrape(port, operator).since(at_start)
        result.requests, result.refused, result.passes = counts.requests, counts.refused, counts.passes
        await clock.informer.stop()
        await jobs_informer.stop()
    finally:
        proc.terminate()
        proc.wait(30)
    await _drop_namespace(kube, namespace)
    return result


def _partner(runs: list[Run], run: Run, prefix: str) -> Run | None:
    """The run of the configuration named ``prefix...`` in the same size and round as ``run``."""
    key = (run.jobs, run.pods_per_job, run.round)
    return next(
        (o for o in runs if o.name.startswith(prefix) and (o.jobs, o.pods_per_job, o.round) == key), None
    )


def _cell(values: list[float], digits: int) -> str:
    """The median of a figure over the rounds, with its range when there was more than one round."""
    if not values:
        return "-"
    cell = f"{statistics.median(values):.{digits}f}"
    return cell + f" ({min(values):.{digits}f}-{max(values):.{digits}f})" if len(values) > 1 else cell


def _per_job(group: list[Run], counts: Callable[[Run], dict[str, int]]) -> str:
    """Median count a job by verb (and code) over the rounds, leaving out what most rounds lacked."""
    medians = {
        k: statistics.median(counts(r).get(k, 0) / r.jobs for r in group)
        for k in sorted({k for r in group for k in counts(r)})
    }
    return ", ".join(f"{k} {median:.2f}" for k, median in medians.items() if median > 0)


def report(runs: list[Run]) -> str:
    columns = (
        "configuration",
        "jobs × pods",
        "p50 create latency (s)",
        "p95 create latency (s)",
        "p95 vs bare",
        "p95 vs bare + jobs",
        "p95 vs least controller",
        "makespan (s)",
        "vs bare",
        "vs upstream",
        "vs floor",
        "CPU (s)",
        "peak RSS (MiB)",
        "passes per job",
        "API requests per job by verb",
    )
    rounds = max((r.round for r in runs), default=0) + 1
    title = "controller throughput" + (f": medians of {rounds} rounds (range)" if rounds > 1 else "")
    table = Table(*columns, title=title)
    lines = _header(columns)
    if rounds > 1:
        lines.insert(
            0, f"Medians of {rounds} rounds, their range in brackets; each ratio within its round.\n"
        )

    def ratios(group: list[Run], prefix: str, figure: Callable[[Run], float]) -> list[float]:
        partners = [(r, _partner(runs, r, prefix)) for r in group]
        return [figure(r) / figure(p) for r, p in partners if p is not None and figure(p)]

    def p95(r: Run) -> float:
        return r.percentile(0.95)

    def makespan(r: Run) -> float:
        return r.makespan

    for (name, jobs, pods), group in _groups(runs).items():
        # the floor of a budgeted client: a pod and a service a replica, at its QPS
        vs_floor = [r.makespan * r.qps / (2 * r.jobs * r.pods_per_job) for r in group if r.qps]
        verbs = _per_job(group, lambda r: r.requests) or "-"
        if refused := _per_job(group, lambda r: r.refused):
            verbs += f" (refused: {refused})"
        cells = [
            name,
            f"{jobs} × {pods}",
            _cell([r.percentile(0.5) for r in group], 2),
            _cell([p95(r) for r in group], 2),
            "-" if name == BARE else _cell(ratios(group, BARE, p95), 2),
            "-" if name in (BARE, BARE_WITH_JOBS) else _cell(ratios(group, BARE_WITH_JOBS, p95), 2),
            "-" if name in (BARE, BARE_WITH_JOBS, LEAST) else _cell(ratios(group, "least", p95), 2),
            _cell([r.makespan for r in group], 1),
            "-" if name == BARE else _cell(ratios(group, BARE, makespan), 2),
            _cell(ratios(group, "upstream", makespan), 2),
            _cell(vs_floor, 2),
            _cell([r.cpu_seconds for r in group if r.cpu_seconds is not None], 1),
            _cell([r.peak_rss_mib for r in group if r.peak_rss_mib is not None], 0),
            _cell([r.passes / r.jobs for r in group if r.passes is not None], 1),
            verbs,
        ]
        table.add_row(*cells)
        lines.append(_row(cells))
    console.print(table)
    for r in runs:
        if r.cache_mib and r.round == 0:
            held = ", ".join(f"{k} {v:g} MiB" for k, v in r.cache_mib.items())
            lines.append(
                f"\nCache of {r.jobs * r.pods_per_job} pods and as many services (tracemalloc): {held}"
            )
            console.print(lines[-1].strip())
    lines.extend(cpu_report(runs))
    lines.extend(burst_report(runs))
    lines.append(f"\nRun with {environment()}.")
    return "\n".join(lines) + "\n"


def _row(cells: Iterable[str]) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def _header(columns: Sequence[str]) -> list[str]:
    """The heading row of a markdown table and the line under it."""
    return [_row(columns), "|" + "---|" * len(columns)]


def _processes(cpu_by_process: Iterable[dict[str, float]]) -> list[str]:
    """The processes that spent at least 0.05 CPU seconds in any of the runs, in the order first seen."""
    return list(dict.fromkeys(n for cpu in cpu_by_process for n, seconds in cpu.items() if seconds >= 0.05))


def _groups(runs: list[Run]) -> dict[tuple[str, int, int], list[Run]]:
    """The runs of each configuration and size, over the rounds."""
    groups: dict[tuple[str, int, int], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.name, r.jobs, r.pods_per_job), []).append(r)
    return groups


def _named(run: Run, runs: list[Run]) -> str:
    """The configuration's name, and the run's round where there were several."""
    return f"{run.name} #{run.round + 1}" if any(r.round for r in runs) else run.name


def cpu_report(runs: list[Run]) -> list[str]:
    """The CPU seconds every process spent during each run, and how busy that kept the machine
    (their sum over cores times makespan): markdown lines. Run against a cluster it did not start
    (``--kubeconfig``), the benchmark knows no component's pid: only it and the operator are listed."""
    measured = [r for r in runs if r.cpu_by_process]
    if not measured:
        return []
    names = _processes(r.cpu_by_process for r in measured)
    columns = ("configuration", "jobs × pods", *names, "total", "machine busy")
    lines = ["\nCPU seconds during each run, by process:\n", *_header(columns)]
    cores = os.cpu_count() or 1
    for r in measured:
        total = sum(r.cpu_by_process.values())
        cells = [_named(r, measured), f"{r.jobs} × {r.pods_per_job}"]
        cells += [f"{r.cpu_by_process[n]:.1f}" if n in r.cpu_by_process else "-" for n in names]
        cells += [f"{total:.1f}", f"{total / (cores * r.makespan):.0%}" if r.makespan else "-"]
        lines.append(_row(cells))
    return lines


def burst_report(runs: list[Run]) -> list[str]:
    """The CPU every process spent in the p95 window (``Burst``), medians over the rounds, and how
    busy that kept the machine: markdown lines. A machine busy near 100% in every configuration
    means the p95 ratios are ratios of the CPU spent in the window."""
    measured = [r for r in runs if r.burst and r.burst_seconds]
    if not measured:
        return []
    names = _processes(r.burst for r in measured)
    columns = ("configuration", "jobs × pods", "window (s)", *names, "total", "machine busy (%)")
    lines = [
        "\nCPU seconds from the first submit until 95% of the jobs had all their pods (the window the p95 "
        "create latency measures), by process; medians over the rounds:\n",
        *_header(columns),
    ]
    cores = os.cpu_count() or 1
    for (name, jobs, pods), group in _groups(measured).items():
        cells = [name, f"{jobs} × {pods}", _cell([r.burst_seconds for r in group], 2)]
        cells += [f"{statistics.median(r.burst.get(n, 0.0) for r in group):.2f}" for n in names]
        totals = [sum(r.burst.values()) for r in group]
        cells += [
            _cell(totals, 2),
            _cell([100 * t / (cores * r.burst_seconds) for t, r in zip(totals, group, strict=True)], 0),
        ]
        lines.append(_row(cells))
    return lines


def environment() -> str:
    """What the figures depend on besides the code: the cores, and the libraries on the request path
    (a new aiohttp once cost the controller a third of its CPU)."""
    libraries = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("aiohttp", "kubernetes_asyncio")
    )
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {libraries}"


def plot_burst(runs: list[Run], ax: Any) -> None:
    """Stacked bars: the CPU of the p95 window by process (medians over the rounds), for the
    configurations no budget holds back, whose p95 follows it."""
    unbudgeted = [r for r in runs if r.qps is None and r.burst]
    groups = _groups(unbudgeted)
    shown = ("operator", "kube-apiserver", "benchmark")
    short = {BARE: "bare", BARE_WITH_JOBS: "bare + jobs"}
    labels = [f"{short.get(name, name.split(' (')[0])}\n{jobs} × {pods}" for name, jobs, pods in groups]

    def cpu(run: Run, part: str) -> float:
        if part in shown:
            return run.burst.get(part, 0.0)
        return sum(seconds for name, seconds in run.burst.items() if name not in shown)

    bottom = [0.0] * len(groups)
    for part in (*shown, "the rest"):
        heights = [statistics.median(cpu(r, part) for r in group) for group in groups.values()]
        ax.bar(labels, heights, bottom=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_title("CPU from the first submit until 95% of the jobs have all their pods")
    ax.set_ylabel("CPU seconds (medians over the rounds)")
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left")


def plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({(r.jobs, r.pods_per_job) for r in runs})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = list(dict.fromkeys(r.name for r in runs))
    color = {name: palette[i % len(palette)] for i, name in enumerate(names)}  # one per configuration
    fig, axes = plt.subplots(1, len(sizes) + 2, figsize=(6 * (len(sizes) + 2), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=False):
        for r in (r for r in runs if (r.jobs, r.pods_per_job) == size):
            ordered = sorted(r.latencies)
            ax.step(
                ordered,
                [(i + 1) / len(ordered) for i in range(len(ordered))],
                where="post",
                color=color[r.name],
                alpha=1.0 if r.round == 0 else 0.4,  # later rounds fainter, unlabelled
                label=f"{r.name} (makespan {r.makespan:.1f}s)" if r.round == 0 else None,
            )
        ax.set_title(f"{size[0]} jobs × {size[1]} pods: submit → all pods created")
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    memory = axes[0][-2]
    for r in runs:
        if r.rss_by_pods and r.jobs == sizes[-1][0] and r.round == 0:
            pods, rss = zip(*r.rss_by_pods, strict=True)
            memory.plot(pods, rss, color=color[r.name], label=r.name)
    memory.set_title(f"RSS while {sizes[-1][0]} jobs × {sizes[-1][1]} pods are created")
    memory.set_xlabel("pods created")
    memory.set_ylabel("RSS (MiB)")
    memory.grid(alpha=0.3)
    memory.legend(fontsize=7, loc="lower right")
    plot_burst(runs, axes[0][-1])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def least_controller() -> Operator:
    """The least a controller does (``least_controller.py``): the floor of the controller pattern."""

    def argv(namespace: str, port: int) -> list[str]:
        return [sys.executable, str(REPO / "benchmarks" / "least_controller.py"), namespace, str(port)]

    return Operator(
        LEAST,
        argv,
        LEAST_STARTED,
        "kubetrain_kube_api_requests_total",
        "verb",
        "kubetrain_reconcile_total",
        None,
    )


def operators(args: argparse.Namespace) -> list[Operator]:
    chosen = [
        least_controller(),
        upstream_operator(),
        kubetrain_operator(UPSTREAM_QPS, UPSTREAM_BURST, THREADS),
        kubetrain_operator(args.qps, max(1, int(args.qps * 2)), None),
    ]
    if not args.only:
        return chosen
    return [o for o in chosen if o.name in args.only or o.name.split()[0] in args.only]


def baselines(args: argparse.Namespace) -> list[str]:
    """The bare creators to run, in order: ``--only bare`` is the bare parallel creator alone."""
    if not args.only:
        return [BARE, BARE_WITH_JOBS]
    chosen = {BARE if name == "bare" else name for name in args.only}
    return [name for name in (BARE, BARE_WITH_JOBS) if name in chosen]


async def measure(args: argparse.Namespace, kubeconfig: Path, cluster: dict[str, int]) -> list[Run]:
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    runs: list[Run] = []
    chosen = operators(args)
    try:
        await prepare_upstream(kube)
        for jobs, round_ in itertools.product(args.jobs, range(args.rounds)):
            size = f"{jobs} jobs × {args.workers + 1} pods" + (
                f", round {round_ + 1} of {args.rounds}" if args.rounds > 1 else ""
            )
            for name in baselines(args):
                with console.status(f"{size}: {name}"):
                    runs.append(
                        await run_baseline(
                            kube, jobs, args.workers, cluster, with_jobs=name == BARE_WITH_JOBS
                        )
                    )
                runs[-1].round = round_
            for operator in chosen:
                with console.status(f"{size}: {operator.name}"):
                    runs.append(await run_operator(kube, kubeconfig, operator, jobs, args.workers, cluster))
                runs[-1].round = round_
                console.print(f"  {size}: {operator.name} {runs[-1].makespan:.1f}s")
    finally:
        await kube.close()
    return runs


def start_cluster(jobs: list[int], workers: int) -> DevCluster:
    """A dev cluster with enough simulated GPU nodes (110 pods each) for the largest run."""
    build.build(console=console)
    cluster = DevCluster(Path(tempfile.mkdtemp(prefix="kubetrain-bench-")) / "state")
    nodes_needed = max(jobs) * (workers + 1) // 100 + 2
    cluster.up(ClusterOptions(gpu_nodes=nodes_needed, gpus_per_node=110, cpu_nodes=1), console=console)
    subprocess.run(
        [str(build.binary_path("kubectl")), "apply", "--server-side", "-f", str(REPO / "deploy/crds")],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        check=True,
        capture_output=True,
    )
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--jobs",
        type=int,
        action="append",
        help=f"jobs per run (repeatable; default ${SIZES_ENV} or 50 and 300)",
    )
    parser.add_argument("--workers", type=int, default=3, help="workers per job (plus one master)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each size this many times over, the bare creator first in each round; the report "
        "gives medians and ranges, each ratio taken within its round",
    )
    parser.add_argument(
        "--qps", type=float, default=0, help="the second kubetrain run's --kube-api-qps (0: unlimited)"
    )
    parser.add_argument(
        "--only",
        action="append",
        help="run only these configurations (bare, upstream, kubetrain, or one by its full name such as "
        "'kubetrain (unlimited)' or 'bare creator + job objects'; repeatable)",
    )
    parser.add_argument(
        "--kubeconfig", help="use this cluster (with deploy/crds applied) instead of starting one"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    sizes = os.environ.get(SIZES_ENV, "")
    args.jobs = args.jobs or [int(n) for n in sizes.split(",") if n.strip()] or [50, 300]
    cluster = None if args.kubeconfig else start_cluster(args.jobs, args.workers)
    try:
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else cluster.kubeconfig  # type: ignore[union-attr]
        components = {c.name: c.pid for c in cluster.status() if c.pid is not None} if cluster else {}
        runs = asyncio.run(measure(args, kubeconfig, components))
    finally:
        if cluster is not None:
            cluster.down()
    results: Path = args.results
    results.mkdir(parents=True, exist_ok=True)
    (results / "controller_throughput.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    (results / "controller_throughput.md").write_text(report(runs))
    plot(runs, results / "controller_throughput.png")
    console.print(f"results in {results}/controller_throughput.{{json,md,png}}")


if __name__ == "__main__":
    main()
