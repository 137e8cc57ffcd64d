"""``make demo``'s script, end to end on the test cluster: Airflow retry with resume, then the KFP pipeline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.client import JobClient, kinds
from kubetrain.devcluster import build
from kubetrain.devcluster.cluster import DevCluster
from tests.conftest import REPO
from tests.docs_commands import run_documented, shell_env

NAMESPACE = "kubetrain-demo"


@pytest.fixture
def demo_controller_stopped(dev_cluster: DevCluster) -> Iterator[None]:
    """The demo starts a controller for every namespace; stop it so later tests own theirs."""
    yield
    dev_cluster.release("controller")


@pytest.mark.usefixtures("crds", "demo_controller_stopped")
def test_the_demo_trains_from_airflow_then_kfp_and_summarizes(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    for venv in (".venv-airflow", ".venv-kfp"):
        if not (REPO / venv / "bin" / "python").exists():
            pytest.skip(f"{venv} is missing (make demo and make test create it)")
    png = REPO / "demo-output" / "training-curves.png"
    png.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "examples/demo.py"],
        cwd=REPO,
        env={**os.environ, "KUBETRAIN_DEV_STATE": str(dev_cluster.state_dir)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for stage in ("3/5 Airflow", "4/5 Kubeflow Pipelines", "5/5 Summary", "injected failure step=60"):
        assert stage in done.stdout, stage
    assert png.exists() and png.stat().st_size > 10_000
    with JobClient.connect(kubeconfig=str(dev_cluster.kubeconfig)) as jobs:
        found = {j["metadata"]["name"]: j for j in jobs.list(namespace=NAMESPACE)}
    retried = next(j for name, j in found.items() if name.endswith("-a2"))
    assert kinds.state(retried) == "Succeeded"
    assert kinds.report(retried)["resumed_from_step"] == 40, (
        "the Airflow retry resumed from the step-40 checkpoint"
    )
    # The first try's job failed and its pods were stopped: nothing says a replica still runs.
    failed = [j for j in found.values() if kinds.state(j) == "Failed"]
    assert failed, "the first Airflow try's job failed"
    for job in failed:
        assert not any(c.get("active") for c in kinds.replica_counts(job).values()), job["status"]
    said_active = [line for line in done.stdout.splitlines() if ": Failed" in line and " active " in line]
    assert not said_active, said_active
    trainjob = next(j for j in found.values() if j["kind"] == "TrainJob")
    assert kinds.state(trainjob) == "Succeeded"
    assert kinds.report(trainjob)["resumed_from_step"] == 60, "the TrainJob continued from the PyTorchJob"
    # the controller kubetrain dev controller starts serves progress reports: every job that trained
    # to its end reported its steps live, and the summary shows them (the live step column, x/total)
    for job in found.values():
        if kinds.state(job) == "Succeeded":
            assert kinds.progress_line(job).startswith("step "), (job["metadata"]["name"], job["status"])
    assert re.search(r"│ \d+/(100|60|120) +│", done.stdout), done.stdout[-3000:]
    # the KFP part keeps its checkpoints in the cluster's S3 server
    location = "s3://kubetrain/kubetrain-demo/kfp-digits"
    kfp_jobs = [j for name, j in found.items() if name.startswith("digits-")]
    assert sorted(kinds.report(j)["last_checkpoint"] for j in kfp_jobs) == [
        f"{location}/step-00000060",
        f"{location}/step-00000120",
    ], [kinds.report(j) for j in kfp_jobs]

    # Then the quickstart's "look around", as written, on the jobs the demo made.
    kfp_pytorchjob = next(name for name in found if name.startswith("digits-pytorchjob-"))
    look = run_documented(
        "docs/quickstart.md",
        "export KUBECONFIG=",
        ".venv/bin/kubetrain list",
        ".venv/bin/kubetrain describe",
        ".venv/bin/kubetrain logs",
        "alias kubectl=",
        "kubectl get nodes",
        "kubectl get kubeflow -A",
        env=shell_env(dev_cluster.kubeconfig, "default", tmp_path),
        replace={
            "~/.cache/kubetrain/dev-cluster": str(dev_cluster.state_dir),
            "~/.cache/kubetrain/bin": str(build.binary_path("kubectl").parent),
            "digits-pytorchjob-XXXXXXXX-a1": kfp_pytorchjob,
            "digits-trainjob-XXXXXXXX-a1": trainjob["metadata"]["name"],
        },
    ).stdout
    assert look.count("Succeeded") >= len(found), look[-3000:]
    assert "kubetrain-process-node" in look and "trainjob.trainer.kubeflow.org/" in look
