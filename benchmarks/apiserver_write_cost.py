"""What each write a training job brings costs the API server, next to the pods every controller creates.

On a cluster whose API server is short of CPU, a controller's makespan follows the CPU the API server
spends on it (docs/performance.md), so this measures kube-apiserver's (and etcd's) CPU seconds per
request for:

* a PyTorchJob's create and a merge PATCH of its status: once with kubetrain's CRD, once with the same
  CRD stripped of its CEL rules (``x-kubernetes-validations``, served under another API group), which
  prices the clear errors at submit that the rules give: every create and every status write of a job
  pays for them, since the API server evaluates the rules on the whole object for either;
* an Event, a Service, a Pod that waits on a scheduling gate (its create alone), and a Pod's whole
  life: created, bound by the scheduler, run to Succeeded by kwok (what each pod of the bare creator
  costs, the scheduler's and kwok's CPU included).

Each measurement sends N requests, 32 in flight, on a dev cluster left to settle, and reads the
processes' CPU seconds from /proc before and after. Rounds run every measurement in turn so that drift
hits them alike; the report takes the median per request.

Results go to benchmarks/results/apiserver_write_cost.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from controller_throughput import (  # benchmarks/ is this script's directory
    REPO,
    RESULTS,
    _namespace,
    _proc_stats,
    console,
    environment,
    manifest,
    start_cluster,
)

from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import CRDS, EVENTS, PODS, SERVICES, Resource

IN_FLIGHT = 32
NO_CEL_GROUP = "no-cel.kubetrain.dev"
MEASURED = ("kube-apiserver", "etcd", "kube-scheduler", "kwok")


def crd_without_cel() -> dict[str, Any]:
    """kubetrain's PyTorchJob CRD with every CEL rule removed, under its own API group."""
    crd = yaml.safe_load((REPO / "deploy/crds/kubeflow.org_pytorchjobs.yaml").read_text())

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("x-kubernetes-validations", None)
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    strip(crd)
    crd["metadata"]["name"] = f"pytorchjobs.{NO_CEL_GROUP}"
    crd["spec"]["group"] = NO_CEL_GROUP
    return dict(crd)


def status_patch(n: int) -> dict[str, Any]:
    """A status write like the controller's: a condition, the start time, the replica counts."""
    stamp = "2026-01-01T00:00:00Z"
    condition = {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"}
    return {
        "status": {
            "conditions": [{**condition, "message": f"pass {n}", "lastUpdateTime": stamp}],
            "startTime": stamp,
            "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": n % 4}},
        }
    }


@dataclass
class Target:
    """Where the requests go: request ``i`` of round ``r`` names its objects ``<kind>-<r>-<i>``."""

    kube: KubeClient
    namespace: str


def _job(t: Target, r: int, i: int, *, resource: Resource, api_version: str) -> Awaitable[Any]:
    body = manifest(f"job-{r}-{i:04d}", 3)
    body["apiVersion"] = api_version
    return t.kube.create(resource, body, t.namespace)


def _status(t: Target, r: int, i: int, *, resource: Resource) -> Awaitable[Any]:
    name = f"job-{r}-{i:04d}"
    return t.kube.patch(resource, name, status_patch(i), namespace=t.namespace, subresource="status")


def _event(t: Target, r: int, i: int) -> Awaitable[Any]:
    body = {
        "metadata": {"generateName": "job-"},
        "involvedObject": {"kind": "PyTorchJob", "name": f"job-{r}-{i:04d}", "namespace": t.namespace},
        "reason": "SuccessfulCreatePod",
        "message": "Created pods: a-master-0, a-worker-0, a-worker-1, a-worker-2",
        "type": "Normal",
        "source": {"component": "kubetrain-controller"},
    }
    return t.kube.create(EVENTS, body, t.namespace)


def _service(t: Target, r: int, i: int) -> Awaitable[Any]:
    spec = {"clusterIP": "None", "selector": {"job": f"{r}-{i}"}, "ports": [{"port": 23456}]}
    return t.kube.create(SERVICES, {"metadata": {"name": f"svc-{r}-{i:04d}"}, "spec": spec}, t.namespace)


def _pod(t: Target, r: int, i: int, *, gated: bool) -> Awaitable[Any]:
    body = manifest("x", 3)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]  # a fresh dict each call
    body["metadata"]["name"] = f"pod-{r}-{i:04d}-{'gated' if gated else 'run'}"
    if gated:
        body["spec"]["schedulingGates"] = [{"name": "kubetrain.dev/benchmark"}]
    body["spec"]["restartPolicy"] = "Never"
    return t.kube.create(PODS, body, t.namespace)


async def _all_succeeded(t: Target) -> None:
    """Until every pod that runs has Succeeded (those waiting on their gate never do)."""
    while True:
        pods, _ = await t.kube.list(PODS, namespace=t.namespace, field_selector="status.phase!=Succeeded")
        if all(p["metadata"]["name"].endswith("-gated") for p in pods):
            return
        await asyncio.sleep(1)


@dataclass
class Measurement:
    write: Callable[[Target, int, int], Awaitable[Any]]  # request i of round r
    done: Callable[[Target], Awaitable[None]] | None = None  # what the requests set going, until it ends


NO_CEL = Resource(NO_CEL_GROUP, "v1", "pytorchjobs", "PyTorchJob")
MEASUREMENTS: dict[str, Measurement] = {
    "PyTorchJob create": Measurement(
        partial(_job, resource=PYTORCHJOB.resource, api_version="kubeflow.org/v1")
    ),
    "PyTorchJob create, CRD without CEL rules": Measurement(
        partial(_job, resource=NO_CEL, api_version=f"{NO_CEL_GROUP}/v1")
    ),
    "PyTorchJob status PATCH": Measurement(partial(_status, resource=PYTORCHJOB.resource)),
    "PyTorchJob status PATCH, CRD without CEL rules": Measurement(partial(_status, resource=NO_CEL)),
    "Event create": Measurement(_event),
    "Service create": Measurement(_service),
    "Pod create (scheduling-gated)": Measurement(partial(_pod, gated=True)),
    "Pod created, scheduled and run to Succeeded": Measurement(partial(_pod, gated=False), _all_succeeded),
}


async def _served(t: Target) -> None:
    """Until the API server serves the CRD without CEL rules (established, and in its discovery)."""
    for _ in range(120):
        try:
            await t.kube.list(NO_CEL, namespace=t.namespace)
            return
        except errors.APINotFoundError:
            await asyncio.sleep(0.5)
    raise TimeoutError(f"the API server does not serve {NO_CEL} a minute after its CRD was created")


async def measure_one(
    measurement: Measurement, target: Target, r: int, n: int, pids: dict[str, int], settle: float
) -> dict[str, float]:
    """Milliseconds of CPU per request each measured process spent on round ``r``'s ``n`` requests."""
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> None:
        async with limit:
            await measurement.write(target, r, i)

    await asyncio.sleep(settle)
    before = {name: _proc_stats(pid)[0] for name, pid in pids.items()}
    await asyncio.gather(*(one(i) for i in range(n)))
    if measurement.done is not None:
        await measurement.done(target)
    await asyncio.sleep(settle)
    return {name: 1000 * (_proc_stats(pid)[0] - before[name]) / n for name, pid in pids.items()}


async def measure(
    kubeconfig: Path, pids: dict[str, int], n: int, rounds: int, settle: float
) -> dict[str, list[dict[str, float]]]:
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    namespace = f"bench-writes-{int(time.time())}"
    await _namespace(kube, namespace)
    target = Target(kube, namespace)
    await kube.create(CRDS, crd_without_cel())
    await _served(target)
    found: dict[str, list[dict[str, float]]] = {name: [] for name in MEASUREMENTS}
    try:
        for r in range(rounds):
            for name, measurement in MEASUREMENTS.items():
                with console.status(f"round {r + 1}/{rounds}: {name}"):
                    found[name].append(await measure_one(measurement, target, r, n, pids, settle))
                cost = found[name][-1]["kube-apiserver"]
                console.print(f"  round {r + 1}: {name}: {cost:.2f} ms of API server CPU a request")
    finally:
        await kube.close()
    return found


def medians(found: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {
        name: {process: statistics.median(r[process] for r in rounds) for process in MEASURED}
        for name, rounds in found.items()
    }


def report(cost: dict[str, dict[str, float]], n: int, rounds: int) -> str:
    gated = cost["Pod create (scheduling-gated)"]["kube-apiserver"]
    lines = [
        f"Median of {rounds} rounds of {n} requests each, {IN_FLIGHT} in flight: CPU milliseconds per request.",
        "",
        f"| request | {' | '.join(f'{p} (ms)' for p in MEASURED)} | API server vs a gated Pod create |",
        f"|---|{'---|' * len(MEASURED)}---|",
    ]
    for name, by_process in cost.items():
        each = " | ".join(f"{by_process[p]:.2f}" for p in MEASURED)
        # a few requests can cost less than one clock tick of CPU: no ratio then
        ratio = f"{by_process['kube-apiserver'] / gated:.2f}" if gated else "-"
        lines.append(f"| {name} | {each} | {ratio} |")
    return "\n".join([*lines, "", environment(), ""])


def plot(cost: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(cost)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    left = [0.0] * len(names)
    for process in MEASURED:
        widths = [cost[n][process] for n in names]
        ax.barh(names, widths, left=left, label=process)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("CPU milliseconds per request")
    ax.set_title("What one request costs the control plane")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500, help="requests per measurement and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every measurement")
    parser.add_argument(
        "--settle",
        type=float,
        default=2.0,
        help="seconds before each measurement and after it (watch fan-out, etcd compaction)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    cluster = start_cluster([args.requests], 0)  # room for the pods that run
    try:
        pids = {c.name: c.pid for c in cluster.status() if c.name in MEASURED and c.pid is not None}
        found = asyncio.run(measure(cluster.kubeconfig, pids, args.requests, args.rounds, args.settle))
    finally:
        cluster.down()
    cost = medians(found)
    results: Path = args.results
    results.mkdir(parents=True, exist_ok=True)
    (results / "apiserver_write_cost.json").write_text(
        json.dumps({"rounds": found, "median": cost}, indent=1)
    )
    table = report(cost, args.requests, args.rounds)
    (results / "apiserver_write_cost.md").write_text(table)
    plot(cost, results / "apiserver_write_cost.png")
    console.print(table)
    console.print(f"results in {results}/apiserver_write_cost.{{json,md,png}}")


if __name__ == "__main__":
    main()
