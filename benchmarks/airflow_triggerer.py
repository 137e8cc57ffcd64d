"""One triggerer, many deferred training tasks: what the shared watch costs in a real Airflow deployment.

A deployment of ``kubetrain dev airflow up`` (Postgres, API server, scheduler with the LocalExecutor,
DAG processor, triggerer) runs ``kt_deferred_many`` (tests/airflow/deployment/dags): N deferrable
PyTorchJob tasks whose simulated pods run until the benchmark lets them finish, all at once. Side by
side for each N (default 20 and 200, in one deployment), measured:

* API requests per minute from the deployment to the cluster while the N tasks wait (the triggerer's
  share: the scheduler and the API server do not talk to the cluster), and the watches open;
* the triggerer's CPU (% of one core) and RSS (all its processes) while the tasks wait;
* the delay from each job's completion (first seen Succeeded by a poll every 0.5 s) to the trigger's
  event (Airflow 3: the task instance scheduled again), and to the task's completion (its end date),
  p50 and p95: the event is the triggerer's part; the rest is the scheduler queueing the resumed
  tasks and the LocalExecutor starting a process for each (parsing its DAG file) to run
  ``execute_complete``.

Usage (from an Airflow environment): .venv-airflow/bin/python benchmarks/airflow_triggerer.py
[--tasks 20 --tasks 200] [--cluster STATE_DIR] [--window 60]
Results go to benchmarks/results/airflow_triggerer.{json,md,png}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubetrain import naming  # noqa: E402
from kubetrain.client import JobClient, kinds  # noqa: E402
from kubetrain.devcluster import build  # noqa: E402
from kubetrain.devcluster.airflow_api import AirflowApi  # noqa: E402
from kubetrain.devcluster.airflow_deploy import AirflowDeployment, AirflowOptions, airflow_major  # noqa: E402
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster  # noqa: E402
from tests.airflow.deployment.harness import (  # noqa: E402
    TEST_DAGS,
    RecordingProxy,
    dag_folder,
    finish_pods,
    until,
    watches,
)
from tests.support import start_controller_process, wait_controller_started  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
DAG = "kt_deferred_many"


@dataclass
class Run:
    """One measured size."""

    tasks: int
    airflow: int
    seconds_to_defer: float = 0.0
    requests_per_minute_waiting: float = 0.0
    requests_waiting_by_kind: dict[str, int] = field(default_factory=dict)
    watches_open: int = 0
    triggerer_cpu_percent_waiting: float = 0.0
    triggerer_rss_mib: float = 0.0
    requests_per_minute_completing: float = 0.0
    requests_by_kind: dict[str, int] = field(default_factory=dict)  # the whole run: submit, wait, finish
    delays: list[float] = field(default_factory=list)  # job done -> task done
    event_delays: list[float] = field(default_factory=list)  # job done -> trigger's event (Airflow 3)

    @property
    def p50(self) -> float:
        return percentile(self.delays, 0.5)

    @property
    def p95(self) -> float:
        return percentile(self.delays, 0.95)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def group_stats(pgid: int) -> tuple[float, float]:
    """CPU seconds and RSS (MiB) of every live process in process group ``pgid``."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = rss = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            cpu += (int(fields[11]) + int(fields[12])) / ticks
            rss += int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, IndexError, ValueError):
            continue
    return cpu, rss


def kind_of_request(exchange: Any) -> str:
    if exchange.query.get("watch"):
        return "watch"
    if exchange.method == "GET":
        return "list" if exchange.path.endswith("s") and "/log" not in exchange.path else "get"
    return exchange.method.lower()


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.argv = [str(build.binary_path("kubectl")), f"--kubeconfig={kubeconfig}"]

    def __call__(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.argv, *args], input=input, text=True, capture_output=True, check=True)


def measure(
    size: int,
    window: float,
    api: AirflowApi,
    deployment: AirflowDeployment,
    proxy: RecordingProxy,
    jobs_client: JobClient,
    kubectl: Kubectl,
    namespace: str,
) -> Run:
    run = Run(size, api.major)
    started = time.monotonic()
    run_id = f"bench-{size}-{uuid.uuid4().hex[:6]}"
    api.trigger(DAG, run_id, {"count": size, "hang": True})
    print(f"[{size}] triggered {run_id}", flush=True)

    def deferred() -> bool:
        tis = [t for t in api.task_instances(DAG, run_id) if t["task_id"] == "train"]
        return len(tis) == size and all(t["state"] == "deferred" for t in tis)

    until(deferred, 120 + 10 * size, f"{size} tasks to be deferred", interval=3)
    run.seconds_to_defer = round(time.monotonic() - started, 1)
    print(f"[{size}] all deferred after {run.seconds_to_defer}s", flush=True)
    time.sleep(30)  # the triggerer picks up the last triggers and settles
    pgid = deployment.pid("triggerer")
    cpu_before, _ = group_stats(pgid)
    window_start = time.monotonic()
    time.sleep(window)
    cpu_after, run.triggerer_rss_mib = group_stats(pgid)
    waiting = proxy.since(window_start)
    run.triggerer_cpu_percent_waiting = round(100 * (cpu_after - cpu_before) / window, 1)
    run.requests_per_minute_waiting = round(len(waiting) * 60 / window, 1)
    for exchange in waiting:
        kind = kind_of_request(exchange)
        run.requests_waiting_by_kind[kind] = run.requests_waiting_by_kind.get(kind, 0) + 1
    run.watches_open = sum(1 for e in watches(proxy.proxy.exchanges, "pytorchjobs") if e.finished is None)
    print(f"[{size}] waiting: {asdict(run)}", flush=True)

    selector = f"{naming.LABEL_DAG_ID}={DAG},{naming.LABEL_RUN_ID}={naming.label_value(run_id)}"
    jobs = {
        j["metadata"]["name"]: j
        for j in jobs_client.list(kind="PyTorchJob", namespace=namespace, label_selector=selector)
    }
    released = time.monotonic()
    finish_pods(kubectl, namespace, sorted(jobs))
    done_at: dict[str, float] = {}  # job name -> wall-clock time first seen Succeeded
    while len(done_at) < len(jobs):
        for job in jobs_client.list(kind="PyTorchJob", namespace=namespace, label_selector=selector):
            if kinds.state(job) == "Succeeded":
                done_at.setdefault(job["metadata"]["name"], time.time())
        time.sleep(0.5)
    until(lambda: api.dag_run(DAG, run_id)["state"] in ("success", "failed"), 600 + 5 * size, "the run")
    completing = proxy.since(released)
    run.requests_per_minute_completing = round(len(completing) * 60 / (time.monotonic() - released), 1)
    for exchange in proxy.since(started):
        kind = kind_of_request(exchange)
        run.requests_by_kind[kind] = run.requests_by_kind.get(kind, 0) + 1
    by_index = {int(j["metadata"]["labels"][naming.LABEL_MAP_INDEX]): name for name, j in jobs.items()}
    for ti in api.task_instances(DAG, run_id):
        if ti["task_id"] != "train":
            continue
        done = done_at[by_index[int(ti["map_index"])]]
        run.delays.append(round(_timestamp(ti["end_date"]) - done, 3))
        if ti.get("scheduled_when"):  # Airflow 3: when the triggerer's event put the task back in line
            run.event_delays.append(round(_timestamp(ti["scheduled_when"]) - done, 3))
    print(f"[{size}] delays p50 {run.p50:.1f}s p95 {run.p95:.1f}s", flush=True)
    return run


def _timestamp(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def report(runs: list[Run]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            **asdict(r),
            "p50": r.p50,
            "p95": r.p95,
            "event_p50": percentile(r.event_delays, 0.5),
            "event_p95": percentile(r.event_delays, 0.95),
        }
        for r in runs
    ]
    (RESULTS / "airflow_triggerer.json").write_text(json.dumps(rows, indent=2))
    base = runs[0]
    lines = [
        f"Airflow {base.airflow}, one triggerer; ratios against {base.tasks} tasks.",
        "",
        "| deferred tasks | API requests/min waiting (ratio) | watches open | triggerer CPU % waiting | "
        "triggerer RSS MiB (ratio) | requests/min completing | job done → trigger event p50 / p95 (s) | "
        "job done → task done p50 / p95 (s) | requests of the whole run by kind |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ratio = (
            r.requests_per_minute_waiting / base.requests_per_minute_waiting
            if base.requests_per_minute_waiting
            else 0
        )
        lines.append(
            f"| {r.tasks} | {r.requests_per_minute_waiting:g} ({ratio:.2f}) | {r.watches_open} | "
            f"{r.triggerer_cpu_percent_waiting:g} | {r.triggerer_rss_mib:.0f} "
            f"({r.triggerer_rss_mib / base.triggerer_rss_mib:.2f}) | {r.requests_per_minute_completing:g} | "
            f"{percentile(r.event_delays, 0.5):.1f} / {percentile(r.event_delays, 0.95):.1f} | "
            f"{r.p50:.1f} / {r.p95:.1f} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(r.requests_by_kind.items()))
            + " |"
        )
    lines += [
        "",
        '"Job done" is when a poll of the jobs (every 0.5 s) first saw it Succeeded; the poll lags under',
        "load, so a trigger event can read as before it (negative). Task done includes the scheduler",
        "queueing the resumed tasks and the LocalExecutor (twice the cores) starting a process for each.",
        "Measured on 2 cores shared with other work (load average 8 to 10).",
    ]
    (RESULTS / "airflow_triggerer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        for values, style, what in ((r.event_delays, "--", "trigger event"), (r.delays, "-", "task done")):
            ordered = sorted(values)
            fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
            left.plot(ordered, fractions, style, label=f"{r.tasks} tasks: {what}")
    left.set_xlabel("seconds after the job succeeded")
    left.set_ylabel("fraction of tasks")
    left.set_title("completion delay (CDF)")
    left.legend()
    labels = [f"{r.tasks} tasks" for r in runs]
    positions = range(len(runs))
    right.bar(
        [p - 0.2 for p in positions], [r.triggerer_rss_mib for r in runs], 0.4, label="triggerer RSS (MiB)"
    )
    twin = right.twinx()
    twin.bar(
        [p + 0.2 for p in positions],
        [r.triggerer_cpu_percent_waiting for r in runs],
        0.4,
        color="#dd8452",
        label="triggerer CPU (% of a core)",
    )
    right.set_xticks(list(positions), labels)
    right.set_ylabel("triggerer RSS (MiB)")
    twin.set_ylabel("triggerer CPU while waiting (% of a core)")
    waiting = ", ".join(f"{r.requests_per_minute_waiting:g}" for r in runs)
    right.set_title(f"while waiting (API requests/min: {waiting}; one watch)")
    handles = right.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    right.legend(handles=handles, loc="upper left", fontsize="small")
    right.set_ylim(0, max(r.triggerer_rss_mib for r in runs) * 1.4)
    fig.tight_layout()
    fig.savefig(RESULTS / "airflow_triggerer.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tasks", type=int, action="append", help="deferred tasks per run (default 20 and 200)"
    )
    parser.add_argument("--window", type=float, default=60, help="seconds measured while the tasks wait")
    parser.add_argument(
        "--cluster", type=Path, help="state dir of a running dev cluster (default: start one)"
    )
    parser.add_argument("--report-only", action="store_true", help="render the results again from the JSON")
    args = parser.parse_args()
    if args.report_only:
        saved = json.loads((RESULTS / "airflow_triggerer.json").read_text())
        fields = set(Run.__dataclass_fields__)
        report([Run(**{k: v for k, v in row.items() if k in fields}) for row in saved])
        return
    sizes = args.tasks or [20, 200]
    airflow_major()  # fails early outside an Airflow environment
    work = Path(tempfile.mkdtemp(prefix="kubetrain-bench-airflow-"))
    cluster = DevCluster(args.cluster or work / "cluster")
    started_cluster = not cluster.is_up()
    if started_cluster:
        cluster.up(ClusterOptions(gpu_nodes=2, cpu_nodes=4, process_node=False))
    kubectl = Kubectl(cluster.kubeconfig)
    namespace = f"bench-af-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "-f", str(REPO / "deploy" / "crds"))
    kubectl("create", "namespace", namespace)
    controller_log = work / "controller.log"
    controller = start_controller_process(cluster.kubeconfig, namespace, controller_log)
    wait_controller_started(controller, controller_log)
    proxy = RecordingProxy(cluster.kubeconfig)
    deployment = AirflowDeployment(work / "airflow")
    try:
        deployment.up(
            AirflowOptions(
                cluster=str(cluster.state_dir),
                dags_folder=str(dag_folder(work / "dags")),
                kubeconfig=str(proxy.proxy.write_kubeconfig(work / "proxied.kubeconfig")),
                namespace=namespace,
            )
        )
        api = deployment.api()
        until(lambda: all(api.dag(d) for d in TEST_DAGS), 300, "the DAGs")
        with JobClient.connect(kubeconfig=str(cluster.kubeconfig)) as jobs_client:
            runs = [
                measure(n, args.window, api, deployment, proxy, jobs_client, kubectl, namespace)
                for n in sizes
            ]
        report(runs)
    finally:
        deployment.down()
        proxy.stop()
        controller.terminate()
        controller.wait(30)
        subprocess.run([*kubectl.argv, "delete", "namespace", namespace, "--wait=false"], check=False)
        if started_cluster:
            cluster.down()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
