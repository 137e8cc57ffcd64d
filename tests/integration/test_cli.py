"""The ``kubetrain`` job commands, run as a user runs them: a process against the dev cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, Kubectl
from tests.docs_commands import run_documented
from tests.support import HANG, TRAINER_REPORT, fails, pytorchjob, runs_for, training_runtime, trainjob

pytestmark = pytest.mark.usefixtures("controller_process")


@pytest.fixture
def cli(kubeconfig: Path, namespace: str, tmp_path: Path) -> Any:
    """Run ``kubetrain ARGS [FILE]`` in this test's namespace; returns the finished process. Its output
    is a pipe, as in a script or a CI log; ``columns`` is the width it is told it has (None: not told)."""

    def run(
        *args: str, manifest: Any = None, timeout: float = 120, columns: str | None = "200"
    ) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "kubetrain", *args, "-n", namespace]
        if manifest is not None:
            path = tmp_path / "job.yaml"
            path.write_text(yaml.safe_dump_all(manifest if isinstance(manifest, list) else [manifest]))
            command.append(str(path))
        return subprocess.run(
            command,
            env={
                **{k: v for k, v in os.environ.items() if k != "COLUMNS"},
                "KUBECONFIG": str(kubeconfig),
                **({"COLUMNS": columns} if columns else {}),
            },
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


def test_submit_wait_exits_zero_when_the_job_succeeds(cli: Any) -> None:
    done = cli("submit", "--wait", manifest=pytorchjob("ok", workers=1, master_annotations=runs_for("2s")))
    assert done.returncode == 0, done.stderr
    assert "PyTorchJob ok succeeded" in done.stdout
    assert "PyTorchJob" in done.stdout.splitlines()[0] or "KIND" in done.stdout


def test_a_failed_job_exits_one_with_its_reason(cli: Any) -> None:
    manifest = pytorchjob(
        "bad", workers=0, restart_policy="Never", master_annotations=fails(code=7, after="1s")
    )
    done = cli("submit", "--wait", manifest=manifest)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exited with code 7" in done.stderr


def test_bad_input_exits_two_naming_the_problem(cli: Any) -> None:
    runtime = training_runtime("torch")
    rejected = cli("submit", manifest=runtime)
    assert rejected.returncode == 2 and "holds no training job" in rejected.stderr
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bad"}, "spec": {}}
    refused = cli("submit", manifest=[claim, pytorchjob("never", workers=1)])
    assert refused.returncode == 2 and "spec.accessModes" in refused.stderr, refused.stderr
    assert cli("get", "never").returncode == 3, "nothing is submitted when what the job needs is refused"
    invalid = pytorchjob("neg", workers=1)
    invalid["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = -1
    refused = cli("submit", manifest=invalid)
    assert refused.returncode == 2 and "replicas" in refused.stderr
    assert cli("get", "pytorchjob/missing").returncode == 3
    assert cli("get", "nothing-here").returncode == 3


def test_list_get_and_describe_show_every_kind(cli: Any, kubectl: Kubectl, namespace: str) -> None:
    assert (
        cli(
            "submit", manifest=pytorchjob("pt", workers=1, master_annotations=HANG, worker_annotations=HANG)
        ).returncode
        == 0
    )
    runtime = training_runtime("torch", pod_annotations=HANG)
    # One file with the job and the runtime it needs, as kubectl apply takes it.
    submitted = cli("submit", manifest=[runtime, trainjob("tj", "torch")])
    assert submitted.returncode == 0, submitted.stderr
    assert "trainingruntime/torch created" in submitted.stderr
    listed = json.loads(cli("list", "-o", "json").stdout)
    assert sorted((j["kind"], j["metadata"]["name"]) for j in listed) == [
        ("PyTorchJob", "pt"),
        ("TrainJob", "tj"),
    ]
    table = cli("list").stdout
    assert "PyTorchJob" in table and "TrainJob" in table and "STATE" in table
    got = yaml.safe_load(cli("get", "tj/tj", "-o", "yaml").stdout)
    assert got["spec"]["runtimeRef"]["name"] == "torch"
    described = cli("describe", "pt").stdout
    assert "Conditions" in described and "Created" in described and "Events" in described
    assert "pt-master-0" in described


def test_through_a_pipe_nothing_is_cut_and_the_columns_read_with_awk(cli: Any, namespace: str) -> None:
    """Piped (a script, a CI log, an Airflow task log), rich took 80 columns and cut every long cell;
    the output is now plain columns, as kubectl's, whatever width the process is told."""
    name = "a-training-job-with-a-name-as-long-as-teams-give-them"
    manifest = pytorchjob(name, workers=1, master_annotations=HANG, worker_annotations=HANG)
    assert cli("submit", manifest=manifest).returncode == 0
    assert _state(cli, name, "Running")
    for columns in (None, "40"):
        listed = cli("list", "-A", columns=columns).stdout
        header, *rows = listed.splitlines()
        assert header.split() == [
            "NAMESPACE", "KIND", "NAME", "STATE", "REPLICAS", "PROGRESS", "ETA", "LAST", "CHECKPOINT", "AGE"
        ], listed  # fmt: skip
        [row] = [r for r in rows if r.split()[0] == namespace]
        assert row.split()[:4] == [namespace, "PyTorchJob", name, "Running"], listed
        assert "…" not in listed and "\x1b" not in listed, "no ellipsis, no colour codes in a pipe"
        wide = cli("list", "-o", "wide", columns=columns).stdout
        assert wide.splitlines()[0].split()[-2:] == ["RESTARTS", "REPORTED"], wide
        described = cli("describe", name, columns=columns).stdout
        assert f"{name}-worker-0" in described and "…" not in described, described
    assert cli("list", "-o", "name").stdout.splitlines() == [f"pytorchjob.kubeflow.org/{name}"]
    got = json.loads(cli("get", f"pytorchjob.kubeflow.org/{name}", "-o", "json").stdout)
    assert got["metadata"]["name"] == name, "a name kubectl prints is taken back"


def test_top_and_describe_show_what_a_running_job_reported(
    cli: Any, kubectl: Kubectl, namespace: str
) -> None:
    running = pytorchjob("reporting", workers=1, master_annotations=HANG, worker_annotations=HANG)
    assert cli("submit", manifest=running).returncode == 0
    assert (
        cli(
            "submit", "--wait", manifest=pytorchjob("finished", workers=0, master_annotations=runs_for("1s"))
        ).returncode
        == 0
    )
    assert _state(cli, "reporting", "Running")
    # What the status server writes when the training reports (docs/observability.md).
    annotated = kubectl(
        "annotate",
        "-n",
        namespace,
        "pytorchjob/reporting",
        f"kubetrain.dev/trainer-status={json.dumps(TRAINER_REPORT)}",
    )
    assert annotated.returncode == 0, annotated.stderr
    frame = cli("top", "--once").stdout
    assert "1 running" in frame and "reporting" in frame and "finished" not in frame, frame
    assert "40%" in frame and "step 400/1000, 40%, ETA 1m30s, loss 0.25" in frame, frame
    described = cli("describe", "reporting").stdout
    assert "Progress: step 400/1000, 40%, ETA 1m30s, loss 0.25" in described, described


def test_suspend_and_resume_a_running_job(cli: Any) -> None:
    assert (
        cli(
            "submit",
            manifest=pytorchjob("pausable", workers=1, master_annotations=HANG, worker_annotations=HANG),
        ).returncode
        == 0
    )
    assert cli("wait", "pausable", "--timeout", "2").returncode == 4, "a running job times out"
    assert cli("suspend", "pausable").returncode == 0
    assert _state(cli, "pausable", "Suspended")
    resumed = cli("resume", "pausable")
    assert resumed.returncode == 0 and "resumed" in resumed.stdout
    assert _state(cli, "pausable", "Running")
    assert cli("delete", "pausable").returncode == 0


def _state(cli: Any, name: str, wanted: str, timeout: float = 30) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = json.loads(cli("get", name, "-o", "json").stdout or "{}")
        conditions = [
            c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"
        ]
        if conditions and conditions[-1] == wanted:
            return True
        time.sleep(0.5)
    return False


def test_resume_resubmits_a_failed_job_and_logs_show_rank_0(cli: Any) -> None:
    script = "import os; print('hello from attempt', os.environ.get('KUBETRAIN_ATTEMPT')); raise SystemExit(0 if os.environ.get('KUBETRAIN_ATTEMPT') == '2' else 3)"
    manifest = pytorchjob(
        "flaky", workers=0, restart_policy="Never", annotations={"kubetrain.dev/checkpoint-dir": "/ckpt"}
    )
    master = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["command"] = ["python", "-c", script]
    master["containers"][0]["workingDir"] = str(REPO)
    master["nodeSelector"] = {"kubetrain.dev/process-node": "true"}
    master["tolerations"] = [
        {"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}
    ]
    failed = cli("submit", "--wait", manifest=manifest)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "hello from attempt 1" in cli("logs", "flaky").stdout
    resumed = cli("resume", "flaky", "--wait", "--timeout", "120")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "flaky-a2" in resumed.stdout
    assert "hello from attempt 2" in cli("logs", "pytorchjob/flaky-a2", "--tail", "5").stdout
    # The lineage, not the job named, decides: its latest attempt succeeded, so nothing resumes.
    again = cli("resume", "pytorchjob/flaky")
    assert again.returncode == 2, again.stdout + again.stderr
    assert "flaky-a2 is Succeeded: only Suspended or Failed jobs resume" in again.stderr
    listed = json.loads(cli("list", "-o", "json").stdout)
    assert sorted(j["metadata"]["name"] for j in listed) == ["flaky", "flaky-a2"]


def test_the_reference_examples_run_as_written(shell: dict[str, str]) -> None:
    done = run_documented(
        "docs/reference/cli.md",
        "kubetrain submit examples/pytorchjob-digits.yaml --wait",
        "kubetrain list -A -o json | jq",
        "kubetrain list -A | awk",
        "kubetrain describe ptj/digits",
        "kubetrain logs digits --role Worker --index 1",
        env=shell,
        timeout=600,
    )
    assert "training failed" not in done.stdout, done.stdout[-2000:]
    assert "\ndigits\n" in done.stdout, "jq found the PyTorchJob in the JSON list"
    assert "/digits\n" in done.stdout, "awk found the succeeded job in the plain columns"
    assert "Succeeded" in done.stdout and "/checkpoints/step-00000200" in done.stdout
    assert "[rank 2]" in done.stdout.splitlines()[-1], "the last line is Worker 1's (rank 2) log"
