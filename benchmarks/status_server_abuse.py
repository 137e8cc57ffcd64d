"""What abusing the status server costs every other job: quiet runs and abused runs side by side.

The status server answers anyone who can reach it. The abuse is what anyone on the pod network can
send: RANDOM_TOKENS requests with random bearer tokens (each unknown token used to cost one
TokenReview, on the client the controller's own writes queue behind), and one pod that reports with
its own valid token in a tight loop. A run starts kubetrain's controller (its status server on) for a fresh
namespace, starts one long-running "reporter" job and mints a token bound to its pod, then submits
JOBS PyTorchJobs and records, from a watch, when each first shows Running: that status comes from the
controller's writes, which the abuse must not slow. In an abused run a separate process (so the
benchmark's own watch is not slowed by it) sends the random tokens, 32 in flight, from just before
the first job is submitted, and runs the reporter's loop until the last job runs. The abuser shares
this machine's cores with the control plane and the controller, which an attacker on another node
would not: so an "elsewhere" run sends the same flood to a stand-in server of the abuser's own (it
answers 401 to everything), which costs the machine what the abuse costs minus the controller's part.
abused / elsewhere is then what the abuse costs because it is aimed at the controller.

Reported per mode (median over rounds; the modes in turn, reversed every other round, so a drift of
the machine hits them alike): the creation-to-Running latency (p50, p95) and makespan of the JOBS
jobs, and their ratios, each the median of the ratios within the rounds (the target for abused /
quiet is at most 1.5); in abused runs, the requests sent, how they were answered (401, 403,
429, 200), and the TokenReviews the controller made (from its metrics), against the cap its budget
allows over the window.

Usage: python benchmarks/status_server_abuse.py [--jobs 50 --random-tokens 2000 --rounds 2]
[--modes quiet,elsewhere,abused] (a subset of the modes reports only the ratios it allows).
Results go to benchmarks/results/status_server_abuse.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.controller.statusserver import admission
from kubetrain.controller.statusserver.authz import status_path
from kubetrain.controller.statusserver.tls import self_signed
from kubetrain.devcluster import build
from kubetrain.devcluster.process import free_port
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import PODS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: tests.support
from controller_throughput import RESULTS, _drop_namespace, _namespace

from tests.support import controller_command

IN_FLIGHT = 32  # concurrent requests with random tokens
REPORT = {"trainerStatus": {"progressPercentage": 1}}


def job(name: str) -> dict[str, Any]:
    pod = {
        "metadata": {"annotations": {"sim.kubetrain.dev/run-duration": "1h"}},
        "spec": {"containers": [{"name": "pytorch", "image": "example.com/train:1"}]},
    }
    return {
        "apiVersion": PYTORCHJOB.api_version,
        "kind": PYTORCHJOB.kind,
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": pod}}
        },
    }


@dataclass
class Run:
    mode: str  # quiet or abused
    latencies: list[float] = field(default_factory=list)
    makespan: float = 0.0
    window: float = 0.0  # seconds the abuse ran
    answers: dict[str, int] = field(default_factory=dict)  # "random 401": n, "reporter 429": n
    token_reviews: int = 0

    @property
    def review_cap(self) -> float:
        """What the TokenReview budget allows over the window (the reporter's own review included)."""
        return admission.REVIEWS_BURST + admission.REVIEWS_QPS * self.window + 1


# -- the abuse, in a process of its own ------------------------------------------------------------------
async def stand_in() -> tuple[str, web.AppRunner]:
    """An HTTPS server in this process that answers every POST with 401: where the flood goes in the
    "elsewhere" runs, so that they cost the machine what the abuse does, minus the controller's part."""

    async def refuse(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"status": 401, "message": "token not valid"}, status=401)

    app = web.Application()
    app.add_routes([web.post("/{path:.*}", refuse)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(
        runner, "127.0.0.1", port, ssl_context=self_signed(["127.0.0.1"]).server_context()
    ).start()
    return f"https://127.0.0.1:{port}/status", runner


async def flood(url: str, token: str, random_tokens: int, stop_file: Path) -> dict[str, int]:
    """``random_tokens`` requests with random tokens, IN_FLIGHT at a time, and the reporter's token in
    a tight loop until ``stop_file`` exists; at ``url``, or at a stand-in of this process' own when
    ``url`` is ``elsewhere``."""
    answers: Counter[str] = Counter()
    left = random_tokens
    server = None
    if url == "elsewhere":
        url, server = await stand_in()
    connector = aiohttp.TCPConnector(ssl=False, limit=IN_FLIGHT + 1)
    async with aiohttp.ClientSession(connector=connector) as session:
        print("ready", flush=True)

        async def post(who: str, bearer: str) -> None:
            headers = {"Authorization": f"Bearer {bearer}"}
            try:
                async with session.post(url, json=REPORT, headers=headers) as answer:
                    answers[f"{who} {answer.status}"] += 1
            except aiohttp.ClientError:
                answers[f"{who} error"] += 1

        async def reporter() -> None:
            while not stop_file.exists():
                await post("reporter", token)

        async def random() -> None:
            nonlocal left
            while left > 0 and not stop_file.exists():
                left -= 1
                await post("random", secrets.token_urlsafe(32))

        await asyncio.gather(reporter(), *(random() for _ in range(IN_FLIGHT)))
    if server is not None:
        await server.cleanup()
    return dict(answers)


# -- one run ----------------------------------------------------------------------------------------------
def token_reviews(port: int) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("kubetrain_kube_api_requests_total{") and "tokenreviews" in line
    )


async def start_controller(
    kubeconfig: Path, namespace: str, metrics: int, status: int
) -> subprocess.Popen[bytes]:
    log = Path(tempfile.gettempdir()) / f"{namespace}.log"
    argv = controller_command(
        namespace,
        f"--status-server-bind-address=127.0.0.1:{status}",
        f"--status-server-url=https://127.0.0.1:{status}",
        metrics_address=f"127.0.0.1:{metrics}",
    )
    proc = subprocess.Popen(
        argv,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        if "controller started" in log.read_text() or proc.poll() is not None:
            return proc
        await asyncio.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"the controller did not start; its log ({log}) ends:\n{log.read_text()[-3000:]}")


async def pod_of(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    for _ in range(600):
        pods, _ = await kube.list(
            PODS, namespace=namespace, label_selector=f"training.kubeflow.org/job-name={name}"
        )
        if pods:
            return pods[0]
        await asyncio.sleep(0.1)
    raise RuntimeError(f"job {name} got no pod")


def bound_token(kubeconfig: Path, namespace: str, pod: dict[str, Any], audience: str) -> str:
    """A token of the pod's ServiceAccount bound to the pod, for ``audience``: what a projected
    serviceAccountToken volume gives the pod."""
    done = subprocess.run(
        [
            str(build.binary_path("kubectl")),
            "--kubeconfig",
            str(kubeconfig),
            "create",
            "token",
            pod["spec"].get("serviceAccountName") or "default",
            "-n",
            namespace,
            "--bound-object-kind=Pod",
            f"--bound-object-name={pod['metadata']['name']}",
            f"--audience={audience}",
            "--duration=1h",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def start_abuser(
    target: str, token: str, random_tokens: int, stop_file: Path
) -> asyncio.subprocess.Process:
    """The flood, in a process of its own; returns once its connections are open."""
    abuser = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--flood",
        target,
        "--token",
        token,
        "--random-tokens",
        str(random_tokens),
        "--stop-file",
        str(stop_file),
        stdout=asyncio.subprocess.PIPE,
    )
    assert abuser.stdout is not None
    ready = await abuser.stdout.readline()  # its imports done, its connections open
    assert ready.strip() == b"ready", ready
    return abuser


async def measure(kube: KubeClient, kubeconfig: Path, jobs: int, random_tokens: int, mode: str) -> Run:
    namespace = f"bench-abuse-{mode}-{int(time.time())}"
    await _namespace(kube, namespace)
    metrics, status = free_port(), free_port()
    proc = await start_controller(kubeconfig, namespace, metrics, status)
    run = Run(mode)
    try:
        await kube.create(PYTORCHJOB.resource, job("reporter"), namespace)
        path = status_path(PYTORCHJOB, namespace, "reporter")
        token = bound_token(kubeconfig, namespace, await pod_of(kube, namespace, "reporter"), path)
        running: dict[str, float] = {}

        def seen(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            if new is None or new["metadata"]["name"] in running:
                return
            conditions = (new.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions):
                running[new["metadata"]["name"]] = time.monotonic()

        watch = Informer(kube, PYTORCHJOB.resource, namespace=namespace)
        watch.add_handler(seen)
        watch.start()
        await watch.wait_synced()
        reviews_before = token_reviews(metrics)
        stop_file = Path(tempfile.mkdtemp()) / "stop"
        abuser = None
        if mode != "quiet":
            target = f"https://127.0.0.1:{status}{path}" if mode == "abused" else "elsewhere"
            abuser = await start_abuser(target, token, random_tokens, stop_file)
        started = time.monotonic()
        created = {}
        for i in range(jobs):
            name = f"job-{i:03d}"
            created[name] = time.monotonic()
            await kube.create(PYTORCHJOB.resource, job(name), namespace)
        while len([n for n in created if n in running]) < jobs and time.monotonic() - started < 600:
            await asyncio.sleep(0.2)
        run.latencies = sorted(running[n] - created[n] for n in created if n in running)
        run.makespan = max(running[n] for n in created if n in running) - started
        if abuser is not None:
            stop_file.touch()
            out, _ = await abuser.communicate()
            run.answers = json.loads(out)
            run.window = time.monotonic() - started
        run.token_reviews = token_reviews(metrics) - reviews_before
        await watch.stop()
        if len(run.latencies) < jobs:
            raise RuntimeError(f"{mode}: only {len(run.latencies)} of {jobs} jobs ran within 600 s")
        return run
    finally:
        proc.terminate()
        proc.wait(30)
        await _drop_namespace(kube, namespace)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


MODES = ("quiet", "elsewhere", "abused")
RATIOS = {
    "abused / quiet": ("abused", "quiet"),
    "elsewhere / quiet": ("elsewhere", "quiet"),
    "abused / elsewhere": ("abused", "elsewhere"),
}


def ratios(modes: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """The ratios the measured modes allow."""
    return {name: pair for name, pair in RATIOS.items() if set(pair) <= set(modes)}


def summary(runs: list[Run], modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Each figure's median per mode, and its ratios: the median over rounds of the ratio within each
    round (a round's runs see the machine alike; rounds differ a lot)."""
    rounds = [runs[i : i + len(modes)] for i in range(0, len(runs) - len(modes) + 1, len(modes))]
    figures: dict[str, dict[str, float]] = {}
    for name, what in (
        ("p50 latency (s)", lambda r: percentile(r.latencies, 0.5)),
        ("p95 latency (s)", lambda r: percentile(r.latencies, 0.95)),
        ("makespan (s)", lambda r: r.makespan),
    ):
        values: dict[str, float] = {
            mode: statistics.median(what(r) for r in runs if r.mode == mode) for mode in modes
        }
        for ratio, (top, bottom) in ratios(modes).items():
            paired = []
            for group in rounds:
                by_mode = {r.mode: what(r) for r in group}
                paired.append(by_mode[top] / by_mode[bottom])
            values[ratio] = statistics.median(paired)
        figures[name] = values
    abused = [r for r in runs if r.mode == "abused"]
    answers: Counter[str] = Counter()
    for r in abused:
        answers.update(r.answers)
    return {
        "modes": list(modes),
        "figures": figures,
        "answers": dict(sorted(answers.items())),
        "token_reviews": [r.token_reviews for r in abused],
        "review_caps": [round(r.review_cap) for r in abused],
    }


def report(result: dict[str, Any], jobs: int, rounds: int) -> str:
    modes = tuple(result["modes"])
    shown = ratios(modes)
    lines = [
        f"# Status server under abuse: {jobs} jobs, {rounds} rounds, the modes in turn (reversed every other round), median per mode",
        "",
        "| figure | " + " | ".join((*modes, *shown)) + " |",
        "|---" * (1 + len(modes) + len(shown)) + "|",
    ]
    for name, values in result["figures"].items():
        cells = [f"{values[key]:.2f}" for key in (*modes, *shown)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios: the median over rounds of the ratio within each round."]
    lines += [
        "",
        "Answers to the abuse (all abused rounds): "
        + ", ".join(f"{k}: {v}" for k, v in result["answers"].items()),
        "",
        f"TokenReviews in each abused round: {result['token_reviews']} (the budget's cap over the window: "
        f"{result['review_caps']})",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["figures"])
    fig, ax = plt.subplots(figsize=(8, 3.5))
    y = range(len(names))
    for k, mode in enumerate(result["modes"]):
        offsets = [i + (k - 1) * 0.27 for i in y]
        ax.barh(offsets, [result["figures"][n][mode] for n in names], height=0.27, label=mode)
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(
        "Other jobs' time to Running: quiet, the flood aimed elsewhere, the flood at the status server"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


async def main_async(args: argparse.Namespace) -> None:
    kubeconfig = Path(args.kubeconfig)
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    modes = tuple(mode for mode in MODES if mode in args.modes.split(","))
    runs: list[Run] = []
    try:
        for round_ in range(args.rounds):
            for mode in modes if round_ % 2 == 0 else tuple(reversed(modes)):
                run = await measure(kube, kubeconfig, args.jobs, args.random_tokens, mode)
                print(
                    f"round {round_ + 1} {mode}: p50 {percentile(run.latencies, 0.5):.2f}s makespan {run.makespan:.2f}s {run.answers}",
                    flush=True,
                )
                runs.append(run)
    finally:
        await kube.close()
    result = summary(runs, modes)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    (results / "status_server_abuse.json").write_text(
        json.dumps({"runs": [asdict(r) for r in runs], **result}, indent=1)
    )
    (results / "status_server_abuse.md").write_text(report(result, args.jobs, args.rounds))
    plot(result, results / "status_server_abuse.png")
    print(report(result, args.jobs, args.rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG", str(Path.home() / ".cache/kubetrain/dev-cluster/kubeconfig")),
    )
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--random-tokens", type=int, default=2000, help="requests with random tokens per abused run"
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="which runs of a round, comma-separated (ratios need both of their modes)",
    )
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--flood", help=argparse.SUPPRESS)  # the abuser process
    parser.add_argument("--token", help=argparse.SUPPRESS)
    parser.add_argument("--stop-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if unknown := set(args.modes.split(",")) - set(MODES):
        parser.error(f"--modes: {', '.join(sorted(unknown))} is not a mode; choose from {', '.join(MODES)}")
    if args.flood:
        print(
            json.dumps(asyncio.run(flood(args.flood, args.token, args.random_tokens, Path(args.stop_file))))
        )
        return
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
