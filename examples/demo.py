"""The demo (``make demo``): training from Airflow and Kubeflow Pipelines on a local cluster.

1. build the control plane (once) and start the local cluster with its process node and its S3
   server;
2. install the CRDs and a TrainingRuntime for the process node, and start the controller;
3. Airflow (``airflow dags test retry_with_resume``): a PyTorchJob whose first try fails
   mid-training; Airflow retries the task and the retry resumes from the last checkpoint (on a
   shared volume);
4. Kubeflow Pipelines (``examples/kfp_pipeline.py``, run with kfp.local): a PyTorchJob, then a
   TrainJob that continues from its checkpoint, then an evaluation step; both keep their
   checkpoints in the S3 server, as training on a cloud cluster does;
5. a summary of every job (with the last step it reported live, through the controller's status
   server) and a training-curve PNG in ``demo-output/``.

Airflow and KFP cannot share one environment (their ``kubernetes`` pins conflict), so each step runs
in its own (``.venv-airflow``, ``.venv-kfp``; ``make demo`` creates them). ``make demo-down`` stops
everything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kubetrain.client import JobClient, kinds
from kubetrain.devcluster import build, paths
from kubetrain.devcluster import controller as dev_controller
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.devcluster.errors import DevClusterError
from kubetrain.devcluster.objectstore import ObjectStore
from kubetrain.plot import Curve, parse, render

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "demo-output"
NAMESPACE = "kubetrain-demo"
STEPS = 5
# The claim the Airflow DAG's attempts share for checkpoints; the KFP pipeline's jobs keep theirs in
# the object store, under CHECKPOINTS, with the credentials in the Secret OBJECT_STORE_SECRET.
CLAIMS = ("retry-with-resume",)
OBJECT_STORE_SECRET = "object-store"
CHECKPOINTS = f"kubetrain/{NAMESPACE}"
TRAINING_LINE = re.compile(r"\[rank 0\] training step=(\d+) loss=([0-9.]+)")
console = Console() if sys.stdout.isatty() else Console(width=120)


class DemoError(Exception):
    """A step failed; the message says which and what to do."""


def step(number: int, text: str) -> None:
    console.rule(f"[bold]{number}/{STEPS}[/] {text}", align="left")


def start_cluster() -> DevCluster:
    step(1, "Local cluster: etcd, API server, scheduler, controller manager, kwok and the process node")
    build.build(console=console)
    cluster = DevCluster(paths.default_state_dir())
    cluster.up(ClusterOptions(workdir=str(REPO), object_store=True), console=console)
    return cluster


def start_controller(cluster: DevCluster) -> None:
    step(2, "CRDs and the kubetrain controller")
    dev_controller.start(cluster, console=console)


def prepare_namespace(cluster: DevCluster) -> None:
    """A fresh demo namespace with the claim and the object store Secret the jobs checkpoint to, and
    the process-node runtime; the previous run's checkpoints are removed, so the jobs start from zero."""
    store = cluster.object_store()
    if store is None:
        raise DemoError(
            "the local cluster runs without its S3 server (it was started before the demo needed one): "
            "stop it with `make demo-down` and run `make demo` again"
        )
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "examples" / "trainjob-runtime-local.yaml"))
    if cluster.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name").strip():
        with console.status("removing the previous demo run"):
            cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s")
    remove_checkpoints(store)
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(store.secret(OBJECT_STORE_SECRET, NAMESPACE)))
    claims = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        for name in CLAIMS
    ]
    cluster.kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": claims})
    )
    console.print(
        f"  [green]✓[/] namespace {NAMESPACE}, claim {', '.join(CLAIMS)}, Secret {OBJECT_STORE_SECRET} "
        f"for s3://{CHECKPOINTS}/, runtime torch-distributed-local"
    )


def remove_checkpoints(store: ObjectStore) -> None:
    """Delete what an earlier demo run left under ``CHECKPOINTS`` in the object store."""
    fs = store.filesystem()
    if fs.exists(CHECKPOINTS):
        fs.rm(CHECKPOINTS, recursive=True)


def run_streaming(
    command: list[str], env: dict[str, str], log: Path, title: str, interesting: re.Pattern[str]
) -> None:
    """Run one stage, its full output to ``log``, a live status line and the lines that tell the story."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w") as out, console.status(title) as status:
        proc = subprocess.Popen(
            command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            text = line.rstrip()
            match = TRAINING_LINE.search(text)
            if match:
                status.update(
                    f"{title}: step {match[1]}, loss {match[2]} ({time.monotonic() - started:.0f}s)"
                )
            if interesting.search(text):
                console.print(f"  {_shorten(text)}", highlight=False)
        code = proc.wait()
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise DemoError(f"{title} failed (exit {code}); full log: {log}\n{tail}")
    console.print(f"  [green]✓[/] {title} ({time.monotonic() - started:.0f}s, log {log.relative_to(REPO)})")


def _shorten(text: str) -> str:
    """A log line without Airflow's time, level, logger and source location."""
    text = re.sub(r"^\S+Z \[\w+\s*\] ", "", text.strip())
    text = re.sub(r"\s+\[airflow[^\]]*\].*$|\s+loc=\S+.*$", "", text)
    return text if len(text) <= 150 else text[:147] + "..."


def environment(venv: str, what: str) -> Path:
    python = REPO / venv / "bin" / "python"
    if not python.exists():
        raise DemoError(f"{venv} is missing: `make demo` creates it (or `make {what}`)")
    return python.parent


def run_airflow(cluster: DevCluster) -> None:
    step(3, "Airflow: a PyTorchJob whose first try fails at step 60; the retry resumes from its checkpoint")
    bin_dir = environment(".venv-airflow", "airflow-venvs")
    home = OUTPUT / "airflow"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(cluster.kubeconfig)}}
        ),
        "KUBECONFIG": str(cluster.kubeconfig),
        "KUBETRAIN_NAMESPACE": NAMESPACE,
    }
    home.mkdir(parents=True, exist_ok=True)
    with console.status("preparing Airflow's metadata database"):
        migrated = subprocess.run(
            [str(bin_dir / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, check=False
        )
    if migrated.returncode != 0:
        raise DemoError(f"airflow db migrate failed: {migrated.stderr[-2000:]}")
    run_streaming(
        [str(bin_dir / "airflow"), "dags", "test", "retry_with_resume"],
        env,
        OUTPUT / "airflow.log",
        "airflow dags test retry_with_resume",
        re.compile(
            r"submitted |submitting attempt|resumed from checkpoint|injected failure|: (Succeeded|Failed);"
            r"|DagRun Finished"
        ),
    )


def run_kfp(cluster: DevCluster) -> None:
    step(4, "Kubeflow Pipelines: a PyTorchJob, then a TrainJob from its checkpoint, then an evaluation")
    bin_dir = environment(".venv-kfp", "kfp-venv")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "KUBETRAIN_NAMESPACE": NAMESPACE}
    run_streaming(
        [str(bin_dir / "python"), "examples/kfp_pipeline.py", "run"],
        env,
        OUTPUT / "kfp.log",
        "examples/kfp_pipeline.py run",
        re.compile(r"\[kubetrain\]|accuracy:|Task '.*' finished", re.I),
    )


def summarize(cluster: DevCluster) -> bool:
    step(5, "Summary")
    with JobClient.connect(kubeconfig=str(cluster.kubeconfig)) as jobs:
        found = sorted(jobs.list(namespace=NAMESPACE), key=lambda j: j["metadata"]["creationTimestamp"])
        curves = [
            Curve(j["metadata"]["name"], kinds.state(j) == "Failed", parse(jobs.logs(j, quiet=True)))
            for j in found
        ]
    table = Table(
        "job",
        "kind",
        "from",
        "state",
        "steps",
        "resumed from step",
        "accuracy",
        "last checkpoint",
        "time",
        "live step",
    )
    for job in found:
        meta = job["metadata"]
        report = kinds.report(job)
        source = "Airflow" if "kubetrain.dev/dag-id" in (meta.get("labels") or {}) else "KFP"
        table.add_row(
            meta["name"],
            job["kind"],
            source,
            kinds.state(job),
            str(report.get("step", "-")),
            str(report.get("resumed_from_step", "-") or "-"),
            str((report.get("metrics") or {}).get("accuracy", "-")),
            (meta.get("annotations") or {}).get("kubetrain.dev/last-checkpoint", "-"),
            _duration(job),
            _live_step(job),
        )
    console.print(table)
    png = render(
        curves,
        OUTPUT / "training-curves.png",
        metrics=["loss"],
        title="Interrupted and resumed: Airflow retry, then PyTorchJob -> TrainJob in KFP",
    )
    console.print(f"training curves: {png.relative_to(REPO)}")
    console.print(
        f"\nexport KUBECONFIG={cluster.kubeconfig}\n.venv/bin/kubetrain list -n {NAMESPACE}\n"
        f".venv/bin/kubetrain describe {found[0]['metadata']['name'] if found else 'JOB'} -n {NAMESPACE}\n"
        "Stop everything with `make demo-down`."
    )
    return len(found) >= 4 and sum(kinds.state(j) == "Succeeded" for j in found) >= 3


def _live_step(job: dict[str, Any]) -> str:
    """The last step the job reported while it ran (through the controller's status server), of its
    total: ``59/100``."""
    metrics = {m.get("name"): m.get("value") for m in kinds.trainer_status(job).get("metrics") or []}
    step = metrics.get("currentStep")
    return "-" if step is None else f"{step}/{metrics.get('totalSteps', '?')}"


def _duration(job: dict[str, Any]) -> str:
    import datetime as dt

    start = job["metadata"].get("creationTimestamp")
    ends = [
        c.get("lastTransitionTime")
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("type") in ("Succeeded", "Complete", "Failed") and c.get("status") == "True"
    ]
    if not start or not ends or not ends[0]:
        return "-"
    parse = lambda value: dt.datetime.fromisoformat(value.replace("Z", "+00:00"))  # noqa: E731
    return f"{(parse(ends[0]) - parse(start)).total_seconds():.0f}s"


def main() -> int:
    try:
        cluster = start_cluster()
        start_controller(cluster)
        prepare_namespace(cluster)
        run_airflow(cluster)
        run_kfp(cluster)
    except (DevClusterError, DemoError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    except subprocess.CalledProcessError as exc:
        console.print(f"[red]error:[/] {' '.join(map(str, exc.cmd[:3]))} failed: {exc.stderr or exc.stdout}")
        return 1
    return 0 if summarize(cluster) else 1


if __name__ == "__main__":
    sys.exit(main())
