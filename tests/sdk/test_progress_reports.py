"""Progress reports, live: a pod on the process node reports through the ``kubeflow`` SDK's unchanged
``update_trainjob_status`` and through ``kubetrain.progress``, the controller's status server writes
them on the job, ``kubectl get`` shows them, and a pod of another job is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubetrain import naming
from kubetrain.devcluster.process import free_port
from tests.conftest import Kubectl
from tests.support import Jobs, eventually, trainjob

pytestmark = pytest.mark.usefixtures("sdk_cluster")


@pytest.fixture
async def status_controller(start_controller: Any) -> Any:
    """The controller with its status server on a loopback port, where process-node pods reach it."""
    port = free_port()
    return await start_controller(
        status_server_bind_address=f"127.0.0.1:{port}", status_server_url=f"https://127.0.0.1:{port}"
    )


def python_job(name: str, script: str, volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A PyTorchJob of one Master running ``script`` (and mounting ``volumes``: (volume, mount))."""
    container: dict[str, Any] = {
        "name": "pytorch",
        "image": "python",
        "command": ["python", "-u", "-c", textwrap.dedent(script)],
    }
    spec: dict[str, Any] = {"containers": [container]}
    if volumes:
        spec["volumes"] = [v for v, _ in volumes]
        container["volumeMounts"] = [m for _, m in volumes]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": spec}}
            }
        },
    }


async def annotation(jobs: Jobs, name: str, key: str, value: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        job = await jobs.get(name)
        return job if ((job or {}).get("metadata", {}).get("annotations") or {}).get(key) == value else None

    return await eventually(probe, timeout=90, what=f"{name} to have {key}={value}")


def shown(kubectl: Kubectl, namespace: str, kind: str, name: str) -> tuple[str, str]:
    """The PROGRESS and ETA columns of ``kubectl get`` (read by position: an empty cell is blank)."""
    header, row = kubectl("get", kind, name, "-n", namespace).stdout.splitlines()[:2]
    progress, eta = (row[header.index(column) :].split()[0] for column in ("PROGRESS", "ETA"))
    return progress, eta


def kubetrain_cli(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kubetrain", *args],
        env={**os.environ, "KUBECONFIG": str(kubeconfig), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


REPORTER = """
    import pathlib, sys, time
    from kubeflow.trainer import update_trainjob_status
    sent = update_trainjob_status(progress_percent=30, estimated_remaining_seconds=120, metrics={"loss": 0.5})
    print("kubeflow SDK report sent:", sent)
    if not sent:
        sys.exit(1)
    while not pathlib.Path(GO).exists():
        time.sleep(0.2)
    from kubetrain.progress import report_progress
    for step in range(1, 8):
        report_progress(step, total=10, metrics={"loss": 1 / step})
    # the last report goes out at exit
"""

INTRUDER = """
    import json, os, ssl, sys, urllib.error, urllib.request
    url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"].replace("/pytorchjobs/intruder/", "/pytorchjobs/victim/")
    context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    def post(token_file):
        token = open(token_file).read().strip()
        body = json.dumps({"trainerStatus": {"progressPercentage": 99}}).encode()
        headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        try:
            urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"), context=context)
            return 200
        except urllib.error.HTTPError as exc:
            return exc.code
    own = post(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"])
    forged = post("/var/run/secrets/forged/token")
    print("own token:", own, "token for the victim's audience:", forged)
    sys.exit(0 if (own, forged) == (401, 403) else 1)
"""


async def test_the_sdk_helper_and_kubetrain_progress_report_and_another_jobs_pod_is_refused(
    status_controller: Any, jobs: Jobs, kubectl: Kubectl, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    await jobs.create(python_job("victim", f"GO = {str(go)!r}\n" + textwrap.dedent(REPORTER)))
    job = await annotation(jobs, "victim", naming.ANNOTATION_PROGRESS, "30")
    annotations = job["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_ETA] == "120"
    reported = json.loads(annotations[naming.ANNOTATION_TRAINER_STATUS])
    assert reported["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert shown(kubectl, namespace, "pytorchjob", "victim") == ("30", "120")

    # A pod of another job, with its own token and with one it asked for the victim's audience.
    victim_path = "/apis/kubeflow.org/v1/namespaces/" + namespace + "/pytorchjobs/victim/status"
    forged = {
        "name": "forged",
        "projected": {"sources": [{"serviceAccountToken": {"audience": victim_path, "path": "token"}}]},
    }
    await jobs.create(
        python_job(
            "intruder", INTRUDER, [(forged, {"name": "forged", "mountPath": "/var/run/secrets/forged"})]
        )
    )
    await jobs.wait_condition("intruder", "Succeeded", timeout=90)  # it exits 0 only on 401 then 403
    job = await jobs.get("victim")
    assert job is not None and job["metadata"]["annotations"][naming.ANNOTATION_PROGRESS] == "30"

    go.touch()
    await jobs.wait_condition("victim", "Succeeded", timeout=90)
    job = await annotation(jobs, "victim", naming.ANNOTATION_PROGRESS, "70")
    reported = json.loads(job["metadata"]["annotations"][naming.ANNOTATION_TRAINER_STATUS])
    assert {"name": "currentStep", "value": "7"} in reported["metrics"]
    assert {"name": "loss", "value": "0.142857"} in reported["metrics"]
    shown_by_cli = kubetrain_cli(kubeconfig, "get", "pytorchjob/victim", "-n", namespace)
    assert "[#######---]  70%" in shown_by_cli, shown_by_cli


async def test_a_trainjob_reports_into_status_trainer_status(
    status_controller: Any, jobs: Jobs, kubectl: Kubectl, namespace: str
) -> None:
    script = (
        "from kubetrain.progress import report_progress\nreport_progress(3, total=4, metrics={'loss': 0.1})\n"
    )
    trainer = {"numNodes": 1, "command": ["python", "-u", "-c", script]}
    await jobs.create(
        trainjob("reports", "torch-distributed", kind="ClusterTrainingRuntime", trainer=trainer)
    )

    async def reported() -> dict[str, Any] | None:
        job = await jobs.get("reports", "TrainJob")
        status = ((job or {}).get("status") or {}).get("trainerStatus")
        return status if status and status.get("progressPercentage") == 75 else None

    status = await eventually(reported, timeout=120, what="the TrainJob's trainerStatus")
    assert {"name": "loss", "value": "0.1"} in status["metrics"]
    assert status["lastUpdatedTime"]
    assert shown(kubectl, namespace, "trainjob", "reports")[0] == "75"
