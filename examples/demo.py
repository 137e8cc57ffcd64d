"""The demo (``make demo``): distributed training on a local cluster, interrupted and resumed.

1. build the control plane (once) and start the local cluster with its process node;
2. install the CRDs and start the controller;
3. train the digits classifier with a PyTorchJob (a Master and two Workers, DDP) whose first
   attempt fails mid-training;
4. resubmit it with the same checkpoint volume: the second attempt resumes from the last
   checkpoint and finishes;
5. print a summary and draw the training curve.

``make demo-down`` stops everything.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from rich.console import Console
from rich.table import Table

from kubetrain.devcluster import build, paths
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.devcluster.errors import DevClusterError

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "demo-output"
NAMESPACE = "kubetrain-demo"
STEPS, EVERY, FAIL_AT = 150, 20, 90
console = Console() if sys.stdout.isatty() else Console(width=120)


def job(name: str, attempt: int, resume_from: str = "") -> dict[str, Any]:
    """A PyTorchJob training examples/train_ddp.py on the process node, checkpointing to a claim."""
    command = [
        "python",
        "examples/train_ddp.py",
        f"--steps={STEPS}",
        f"--checkpoint-every={EVERY}",
        f"--fail-at-step={FAIL_AT}",
        "--fail-on-attempt=1",
        "--step-seconds=0.05",
    ]
    template = {
        "spec": {
            "nodeSelector": {"kubetrain.dev/process-node": "true"},
            "tolerations": [
                {"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "pytorch",
                    "image": "kubetrain/kubetrain:0.1.0",
                    "command": command,
                    "workingDir": str(REPO),
                }
            ],
        }
    }
    annotations = {
        "kubetrain.dev/checkpoint-dir": "/checkpoints",
        "kubetrain.dev/checkpoint-volume": "digits",
        "kubetrain.dev/attempt": str(attempt),
    }
    if resume_from:
        annotations["kubetrain.dev/last-checkpoint"] = resume_from
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": annotations, "labels": {"kubetrain.dev/lineage": "digits"}},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "Never", "template": template},
            },
        },
    }


def step(number: int, text: str) -> None:
    console.rule(f"[bold]{number}/5[/] {text}", align="left")


def start_cluster() -> DevCluster:
    step(1, "Local cluster: etcd, API server, scheduler, controller manager, kwok and the process node")
    build.build(console=console)
    cluster = DevCluster(paths.default_state_dir())
    cluster.up(ClusterOptions(workdir=str(REPO)), console=console)
    return cluster


def start_controller(cluster: DevCluster) -> None:
    step(2, "CRDs and the kubetrain controller")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    kubectl = str(build.binary_path("kubectl"))
    subprocess.run(
        [kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "crds")],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [kubectl, "wait", "--for=condition=Established", "-f", str(REPO / "deploy" / "crds")],
        env=env,
        check=True,
        capture_output=True,
    )
    state = cluster.load_state()
    if state is not None and "controller" in state.pids and _alive(state.pids["controller"]):
        console.print("  the controller is already running")
        return
    log = cluster.log_path("controller")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubetrain",
                "controller",
                "run",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--health-probe-bind-address",
                "0",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster.adopt("controller", proc.pid)
    for _ in range(300):
        if "controller started" in log.read_text():
            break
        if proc.poll() is not None:
            raise DevClusterError(f"the controller exited with {proc.returncode}; see {log}")
        time.sleep(0.1)
    console.print(f"  [green]✓[/] controller pid {proc.pid}, log {log}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


async def watch(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    """Follow a job to its end, showing its state and rank 0's last training step."""
    core = client.CoreV1Api(custom.api_client)
    with console.status(f"{name}: submitted") as status:
        while True:
            current = await custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", name
            )
            conditions = (current.get("status") or {}).get("conditions") or []
            state = conditions[-1]["type"] if conditions else "Pending"
            last_line = ""
            try:
                text = await core.read_namespaced_pod_log(f"{name}-master-0", NAMESPACE, tail_lines=1)
                last_line = text.strip().splitlines()[-1] if text.strip() else ""
            except client.ApiException:
                pass
            status.update(f"{name}: {state}  {last_line}")
            if state in ("Succeeded", "Failed"):
                console.print(
                    f"  {name}: [{'green' if state == 'Succeeded' else 'red'}]{state}[/]: "
                    f"{conditions[-1].get('message', '')}"
                )
                return dict(current)
            await asyncio.sleep(0.5)


async def train(cluster: DevCluster) -> list[dict[str, Any]]:
    api = await config.new_client_from_config(config_file=str(cluster.kubeconfig))
    async with api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        try:
            await core.read_namespace(NAMESPACE)
            await core.delete_namespace(NAMESPACE)
            with console.status("removing the previous demo run"):
                while True:
                    await core.read_namespace(NAMESPACE)
                    await asyncio.sleep(0.5)
        except client.ApiException:
            pass
        await core.create_namespace({"metadata": {"name": NAMESPACE}})
        while not (await core.list_namespaced_service_account(NAMESPACE)).items:
            await asyncio.sleep(0.2)
        await core.create_namespaced_persistent_volume_claim(
            NAMESPACE,
            {
                "metadata": {"name": "digits"},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
            },
        )

        step(3, f"Attempt 1: DDP with a Master and two Workers; it fails at step {FAIL_AT} of {STEPS}")
        started = time.monotonic()
        await custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job("digits-attempt-1", 1)
        )
        first = await watch(custom, "digits-attempt-1")
        first["elapsed"] = time.monotonic() - started
        first = await _with_report(custom, "digits-attempt-1", first)
        last = first["metadata"].get("annotations", {}).get("kubetrain.dev/last-checkpoint", "")

        step(
            4,
            f"Attempt 2: the same job again, same checkpoint volume: it resumes from {last or 'the volume'}",
        )
        started = time.monotonic()
        await custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job("digits-attempt-2", 2, last)
        )
        second = await watch(custom, "digits-attempt-2")
        second["elapsed"] = time.monotonic() - started
        second = await _with_report(custom, "digits-attempt-2", second)
        claim = await core.read_namespaced_persistent_volume_claim("digits", NAMESPACE)
        pv = await core.read_persistent_volume(claim.spec.volume_name)
        second["host_dir"] = pv.spec.host_path.path
        return [first, second]


async def _with_report(custom: client.CustomObjectsApi, name: str, job_obj: dict[str, Any]) -> dict[str, Any]:
    """Wait briefly for rank 0's report to reach the job's annotations."""
    for _ in range(20):
        annotations = job_obj["metadata"].get("annotations") or {}
        if "kubetrain.dev/training-report" in annotations:
            break
        await asyncio.sleep(0.5)
        fresh = await custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", name
        )
        job_obj = {**fresh, "elapsed": job_obj.get("elapsed")}
    return job_obj


def summarize(jobs: list[dict[str, Any]], cluster: DevCluster) -> None:
    step(5, "Summary")
    table = Table("job", "state", "steps", "resumed from step", "accuracy", "last checkpoint", "time")
    for item in jobs:
        annotations = item["metadata"].get("annotations") or {}
        report = json.loads(annotations.get("kubetrain.dev/training-report", "{}"))
        state = (item.get("status") or {}).get("conditions", [{}])[-1].get("type", "?")
        table.add_row(
            item["metadata"]["name"],
            state,
            str(report.get("step", "-")),
            str(report.get("resumed_from_step", "-")),
            str(report.get("metrics", {}).get("accuracy", "-")),
            annotations.get("kubetrain.dev/last-checkpoint", "-"),
            f"{item.get('elapsed', 0):.0f}s",
        )
    console.print(table)
    host_dir = Path(jobs[-1]["host_dir"])
    png = plot(host_dir / "metrics.jsonl")
    console.print(f"checkpoints on this machine: {host_dir}")
    if png:
        console.print(f"training curve: {png}")
    console.print(
        f"\nexport KUBECONFIG={cluster.kubeconfig}\n{build.binary_path('kubectl')} get pytorchjobs,pods "
        f"-n {NAMESPACE} -o wide\nStop everything with `make demo-down`."
    )


def plot(metrics: Path) -> Path | None:
    """Loss against step, one line per attempt, to demo-output/training-curve.png."""
    if not metrics.exists():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points: dict[int, list[tuple[int, float]]] = {}
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        points.setdefault(int(record["attempt"]), []).append((record["step"], record["loss"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    for attempt, values in sorted(points.items()):
        steps, losses = zip(*sorted(values), strict=True)
        ax.plot(steps, losses, marker="o", markersize=3, label=f"attempt {attempt}")
    ax.axvline(FAIL_AT, color="grey", linestyle=":", label="attempt 1 fails")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("DDP on the process node, interrupted and resumed")
    ax.legend()
    ax.grid(alpha=0.3)
    OUTPUT.mkdir(exist_ok=True)
    target = OUTPUT / "training-curve.png"
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    return target


def main() -> int:
    try:
        cluster = start_cluster()
        start_controller(cluster)
        jobs = asyncio.run(train(cluster))
    except DevClusterError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    except subprocess.CalledProcessError as exc:
        console.print(f"[red]error:[/] {' '.join(map(str, exc.cmd[:3]))} failed: {exc.stderr or exc.stdout}")
        return 1
    summarize(jobs, cluster)
    return 0 if (jobs[-1].get("status") or {}).get("conditions", [{}])[-1].get("type") == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
