"""Controller throughput: J PyTorchJobs of 1 Master + W Workers submitted at once, on kwok GPU nodes.

Measured for kubetrain's controller, and in the same run for a bare parallel creator that writes the
same pods and services with no controller logic at all (the floor any controller pays to the API
server and kwok):

* per-job latency from submit to all of its pods created (p50, p95);
* makespan from the first submit to every job Succeeded (baseline: every pod Succeeded);
* the controller's CPU seconds and peak RSS, and its API requests by verb.

Usage: python benchmarks/controller_throughput.py --jobs 50 --workers 3 [--jobs 300 ...]
Results go to benchmarks/results/controller_throughput.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.controller import frameworks
from kubetrain.controller.frameworks.base import job_info
from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.plugins.gpu import GpuPlugin
from kubetrain.controller.reconcilers.children import build_pod, build_service
from kubetrain.devcluster import build
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import NAMESPACES, PODS, SERVICE_ACCOUNTS, SERVICES

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
RUN_FOR = "3s"
console = Console()


@dataclass
class Run:
    """One measured configuration."""

    name: str
    jobs: int
    pods_per_job: int
    latencies: list[float] = field(default_factory=list)
    makespan: float = 0.0
    cpu_seconds: float | None = None
    peak_rss_mib: float | None = None
    requests: dict[str, int] = field(default_factory=dict)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def manifest(name: str, workers: int) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": {"sim.kubetrain.dev/run-duration": RUN_FOR}},
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "example.com/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


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
        if new.get("status", {}).get("phase") == "Succeeded" and name not in self.succeeded:
            self.succeeded.add(name)
            self.last_success = time.monotonic()


async def run_baseline(kube: KubeClient, jobs: int, workers: int) -> Run:
    """Create every pod and service directly, as fast as possible, and wait for the pods to succeed."""
    namespace = f"bench-bare-{jobs}x{workers + 1}-{int(time.time())}"
    await _namespace(kube, namespace)
    result = Run("bare parallel creator", jobs, workers + 1)
    clock = PodClock(kube, namespace, workers + 1)
    clock.informer.start()
    await clock.informer.wait_synced()
    framework = frameworks.by_name("PyTorchJob")
    plugins = [CheckpointPlugin(), GpuPlugin()]  # what the controller applies, so the pods are the same
    objects = []
    for j in range(jobs):
        body = manifest(f"job-{j:04d}", workers)
        body["metadata"].update({"namespace": namespace, "uid": "none"})
        info = job_info(body, framework)
        for rtype, replica in info.replicas.items():
            for index in range(replica.replicas):
                for obj in (build_pod(info, rtype, index, plugins), build_service(info, rtype, index)):
                    obj["metadata"].pop("ownerReferences")
                    objects.append(obj)
    limit = asyncio.Semaphore(64)
    started = time.monotonic()
    submitted = {f"job-{j:04d}": started for j in range(jobs)}

    async def create(obj: dict[str, Any]) -> None:
        async with limit:
            await kube.create(PODS if obj["kind"] == "Pod" else SERVICES, obj, namespace)

    await asyncio.gather(*(create(o) for o in objects))
    total = jobs * (workers + 1)
    while len(clock.succeeded) < total:
        await asyncio.sleep(0.05)
    result.makespan = clock.last_success - started
    result.latencies = [clock.all_created[j] - submitted[j] for j in submitted]
    await clock.informer.stop()
    await kube.delete(NAMESPACES, namespace)
    return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape_requests(port: int) -> dict[str, int]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    by_verb: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("kubetrain_kube_api_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            verb = labels.split('verb="')[1].split('"')[0]
            by_verb[verb] = by_verb.get(verb, 0) + int(float(value))
    return by_verb


def _proc_stats(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MiB of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    return cpu, peak / 1024


async def run_controller(kube: KubeClient, kubeconfig: Path, jobs: int, workers: int, qps: float) -> Run:
    namespace = f"bench-ctrl-{jobs}x{workers + 1}-{int(time.time())}"
    await _namespace(kube, namespace)
    result = Run(f"kubetrain controller (qps {qps:g})", jobs, workers + 1)
    port = _free_port()
    log = Path(tempfile.gettempdir()) / f"{namespace}.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubetrain",
            "controller",
            "run",
            "--namespace",
            namespace,
            "--workers",
            "8",
            "--kube-api-qps",
            str(qps),
            "--kube-api-burst",
            str(max(1, int(qps * 2))),
            "--metrics-bind-address",
            f"127.0.0.1:{port}",
            "--health-probe-bind-address",
            "0",
        ],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(300):
            if "controller started" in log.read_text():
                break
            await asyncio.sleep(0.1)
        cpu_at_start, _ = _proc_stats(proc.pid)  # start-up (imports, cache sync) is not throughput
        clock = PodClock(kube, namespace, workers + 1)
        clock.informer.start()
        await clock.informer.wait_synced()
        jobs_informer = Informer(kube, PYTORCHJOB.resource, namespace=namespace)
        jobs_informer.start()
        await jobs_informer.wait_synced()
        limit = asyncio.Semaphore(64)
        submitted: dict[str, float] = {}

        async def submit(j: int) -> None:
            name = f"job-{j:04d}"
            async with limit:
                submitted[name] = time.monotonic()
                await kube.create(PYTORCHJOB.resource, manifest(name, workers), namespace)

        started = time.monotonic()
        await asyncio.gather(*(submit(j) for j in range(jobs)))

        def done() -> int:
            return sum(
                1
                for job in jobs_informer.objects()
                if any(
                    c["type"] == "Succeeded" and c["status"] == "True"
                    for c in (job.get("status") or {}).get("conditions") or []
                )
            )

        while done() < jobs:
            await asyncio.sleep(0.05)
        result.makespan = time.monotonic() - started
        result.latencies = [clock.all_created[j] - submitted[j] for j in submitted]
        cpu_at_end, result.peak_rss_mib = _proc_stats(proc.pid)
        result.cpu_seconds = cpu_at_end - cpu_at_start
        result.requests = _scrape_requests(port)
        await clock.informer.stop()
        await jobs_informer.stop()
    finally:
        proc.terminate()
        proc.wait(30)
    await kube.delete(NAMESPACES, namespace)
    return result


def report(runs: list[Run]) -> str:
    table = Table(
        "configuration",
        "jobs × pods",
        "p50 create latency",
        "p95 create latency",
        "makespan",
        "vs bare",
        "controller CPU s",
        "peak RSS MiB",
        "API requests by verb",
        title="controller throughput",
    )
    lines = [
        "| configuration | jobs × pods | p50 create latency (s) | p95 create latency (s) | makespan (s) | "
        "makespan vs bare | controller CPU (s) | peak RSS (MiB) | API requests by verb |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    baselines = {(r.jobs, r.pods_per_job): r.makespan for r in runs if r.name.startswith("bare")}
    for r in runs:
        ratio = r.makespan / baselines[(r.jobs, r.pods_per_job)]
        verbs = ", ".join(f"{k} {v}" for k, v in sorted(r.requests.items())) or "-"
        cells = [
            r.name,
            f"{r.jobs} × {r.pods_per_job}",
            f"{r.percentile(0.5):.2f}",
            f"{r.percentile(0.95):.2f}",
            f"{r.makespan:.1f}",
            f"{ratio:.2f}",
            f"{r.cpu_seconds:.1f}" if r.cpu_seconds is not None else "-",
            f"{r.peak_rss_mib:.0f}" if r.peak_rss_mib is not None else "-",
            verbs,
        ]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    return "\n".join(lines) + "\n"


def plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({(r.jobs, r.pods_per_job) for r in runs})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        for r in (r for r in runs if (r.jobs, r.pods_per_job) == size):
            ordered = sorted(r.latencies)
            ax.step(
                ordered,
                [(i + 1) / len(ordered) for i in range(len(ordered))],
                where="post",
                label=f"{r.name} (makespan {r.makespan:.1f}s)",
            )
        ax.set_title(f"{size[0]} jobs × {size[1]} pods: submit → all pods created")
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


async def measure(args: argparse.Namespace, kubeconfig: Path) -> list[Run]:
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    runs: list[Run] = []
    try:
        for jobs in args.jobs:
            with console.status(f"{jobs} jobs × {args.workers + 1} pods: bare parallel creator"):
                runs.append(await run_baseline(kube, jobs, args.workers))
            with console.status(f"{jobs} jobs × {args.workers + 1} pods: kubetrain controller"):
                runs.append(await run_controller(kube, kubeconfig, jobs, args.workers, args.qps))
            console.print(
                f"  done: {jobs} jobs; bare {runs[-2].makespan:.1f}s, controller {runs[-1].makespan:.1f}s"
            )
    finally:
        await kube.close()
    return runs


def start_cluster(args: argparse.Namespace) -> DevCluster:
    """A dev cluster with enough simulated GPU nodes (110 pods each) for the largest run."""
    build.build(console=console)
    cluster = DevCluster(Path(tempfile.mkdtemp(prefix="kubetrain-bench-")) / "state")
    nodes_needed = max(args.jobs) * (args.workers + 1) // 100 + 2
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
        "--jobs", type=int, action="append", help="jobs per run (repeatable; default 50 and 300)"
    )
    parser.add_argument("--workers", type=int, default=3, help="workers per job (plus one master)")
    parser.add_argument(
        "--qps", type=float, default=0, help="controller --kube-api-qps (0: unlimited, like the bare creator)"
    )
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting a dev cluster")
    args = parser.parse_args()
    args.jobs = args.jobs or [50, 300]
    cluster = None if args.kubeconfig else start_cluster(args)
    try:
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else cluster.kubeconfig  # type: ignore[union-attr]
        runs = asyncio.run(measure(args, kubeconfig))
    finally:
        if cluster is not None:
            cluster.down()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "controller_throughput.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    (RESULTS / "controller_throughput.md").write_text(report(runs))
    plot(runs, RESULTS / "controller_throughput.png")
    console.print(f"results in {RESULTS}/controller_throughput.{{json,md,png}}")


if __name__ == "__main__":
    main()
