"""The KFP launcher components: compiled YAML kept fresh, and real runs through kfp.local on the dev cluster.

kfp.local runs each step as a subprocess of this test (``SubprocessRunner(use_venv=False)``), in
this environment, so the steps talk to the dev cluster through ``KUBECONFIG``; the controller runs
as a process of its own, and the training pods run on the process node.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, dsl, local

from kubetrain import naming
from kubetrain.client import JobClient
from kubetrain.client.errors import InvalidJobError, JobFailedError
from kubetrain.components import compile as compile_components
from kubetrain.components.launch import LaunchRequest, launch
from kubetrain.components.launchers import pytorchjob_launcher, trainjob_launcher
from kubetrain.devcluster.cluster import DevCluster
from tests.conftest import REPO, Kubectl
from tests.docs_commands import python_blocks, run_documented
from tests.support import pytorchjob, runs_for

pytestmark = pytest.mark.usefixtures("controller_process")

PLACEMENT = {
    "node_selector": {"kubetrain.dev/process-node": "true"},
    "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}],
}
TRAIN = ["python", "examples/train_ddp.py", "--checkpoint-every=20"]


def training_step(namespace: str, job_name: str, *train_args: str, **inputs: Any) -> LaunchRequest:
    """A step of run ``run-1`` whose PyTorchJob (a Master alone, on the process node) runs
    examples/train_ddp.py with ``train_args``; ``inputs`` as the launcher's."""
    return LaunchRequest(
        kind="PyTorchJob",
        job_name=job_name,
        run_id="run-1",
        namespace=namespace,
        image="kubetrain/kubetrain:0.1.0",
        command=[*TRAIN, *train_args],
        num_workers=0,
        working_dir=str(REPO),
        **PLACEMENT,
        **inputs,
    )


def _example_pipeline() -> Any:
    spec = importlib.util.spec_from_file_location("kfp_pipeline", REPO / "examples" / "kfp_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def kfp_env(kubeconfig: Path, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """kfp.local, with its steps pointed at the dev cluster and this test's namespace."""
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("KUBETRAIN_NAMESPACE", namespace)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "outputs"))
    return tmp_path


@pytest.fixture
def jobs(kubeconfig: Path) -> Iterator[JobClient]:
    with JobClient.connect(kubeconfig=str(kubeconfig)) as client:
        yield client


def claim(kubectl: Kubectl, namespace: str, name: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    kubectl("apply", "-f", "-", input=json.dumps(body))


def test_the_committed_component_yaml_is_what_the_components_compile_to(tmp_path: Path) -> None:
    for path in compile_components.compile_all(tmp_path):
        committed = REPO / "components" / path.name
        assert committed.read_text() == path.read_text(), (
            f"components/{path.name} is stale: run python -m kubetrain.components.compile"
        )


def test_the_example_pipeline_compiles(shell: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "pipeline.yaml"
    run_documented(
        "docs/kfp.md",
        ".venv-kfp/bin/python examples/kfp_pipeline.py compile",
        env=shell,
        replace={"digits.yaml": str(target)},
    )
    text = target.read_text()
    assert "pytorchjob-launcher" in text and "trainjob-launcher" in text and "evaluate" in text


def test_the_documented_pipeline_compiles(tmp_path: Path) -> None:
    from kfp import compiler

    scope: dict[str, Any] = {}
    (block,) = python_blocks("docs/kfp.md")
    # The guide's pipeline as a module of its own defines it (not under this file's __future__ import,
    # which would turn the component's annotations into strings).
    exec(compile(block, "docs/kfp.md", "exec", dont_inherit=True), scope)
    target = tmp_path / "train.yaml"
    compiler.Compiler().compile(scope["train"], str(target))
    text = target.read_text()
    assert "pytorchjob-launcher" in text and "trainjob-launcher" in text and "nvidia.com/gpu" in text


def test_a_step_queues_its_job_in_the_kueue_queue_it_names() -> None:
    # Kueue reads the labels at creation; a retried step's next attempt keeps them (built the same way).
    request = LaunchRequest(
        kind="PyTorchJob", image="x", run_id="run-1", queue_name="team-a", priority_class="high"
    )
    labels = request.build("step-a1")["metadata"]["labels"]
    assert labels[naming.LABEL_KUEUE_QUEUE_NAME] == "team-a"
    assert labels[naming.LABEL_KUEUE_PRIORITY_CLASS] == "high"
    manifest = LaunchRequest(
        kind="PyTorchJob", run_id="run-1", manifest=training_step("n", "j").build("j"), queue_name="q"
    )
    assert manifest.build("j-a1")["metadata"]["labels"][naming.LABEL_KUEUE_QUEUE_NAME] == "q"


def test_bad_inputs_are_rejected_naming_the_input(kfp_env: Path, namespace: str) -> None:
    step = {"namespace": namespace, "run_id": "run-1"}
    with pytest.raises(InvalidJobError, match="runtime is required"):
        launch(LaunchRequest(kind="TrainJob", image="example.com/train:1", **step))
    with pytest.raises(InvalidJobError, match="image is required"):
        launch(LaunchRequest(kind="PyTorchJob", **step))
    with pytest.raises(InvalidJobError, match="resume_from needs checkpoint_dir"):
        launch(LaunchRequest(kind="PyTorchJob", image="x", resume_from="/c/step-1", **step))
    with pytest.raises(InvalidJobError, match="num_workers"):
        launch(LaunchRequest(kind="PyTorchJob", image="x", num_workers=-1, **step))
    with pytest.raises(InvalidJobError, match="queue_name must name a Kueue LocalQueue"):
        launch(LaunchRequest(kind="PyTorchJob", image="x", queue_name="Team A", **step))
    # Without its pipeline run, a step could find another run's job: refused, saying what to pass.
    with pytest.raises(InvalidJobError, match=r"run_id=dsl\.PIPELINE_JOB_ID_PLACEHOLDER"):
        launch(LaunchRequest(kind="PyTorchJob", image="x", namespace=namespace))
    with pytest.raises(InvalidJobError, match="KFP did not resolve that placeholder"):
        launch(
            LaunchRequest(kind="PyTorchJob", image="x", run_id="{{$.pipeline_job_uuid}}", namespace=namespace)
        )
    # Through KFP: the step fails before anything is submitted.
    with pytest.raises(RuntimeError, match="FAILURE"):
        pytorchjob_launcher(namespace=namespace, image="")


def test_the_example_pipeline_trains_a_pytorchjob_then_a_trainjob_from_its_checkpoint(
    kfp_env: Path, shell: dict[str, str], namespace: str, jobs: JobClient, dev_cluster: DevCluster
) -> None:
    """Both jobs keep their checkpoints in the test cluster's S3 server; the TrainJob resumes from the
    PyTorchJob's last one."""
    run_documented(
        "docs/kfp.md",
        "kubectl apply -f examples/trainjob-runtime-local.yaml",
        ".venv/bin/kubetrain dev object-store --secret",
        env=shell,
        replace={"-n default": f"-n {namespace} --state-dir {dev_cluster.state_dir}"},
    )
    pipeline = _example_pipeline()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(kfp_env / "outputs"))
    location = f"s3://kubetrain/{namespace}/kfp-digits"
    run = pipeline.digits_pipeline(
        namespace=namespace,
        checkpoint_dir=location,
        first_steps="40",
        total_steps="80",
        wait_timeout=300.0,
    )
    assert run is not None
    (first,) = jobs.list(kind="PyTorchJob", namespace=namespace)
    (second,) = jobs.list(kind="TrainJob", namespace=namespace)
    first_report = JobClient.report(first)
    second_report = JobClient.report(second)
    assert first_report["step"] == 40 and second_report["step"] == 80
    assert second_report["resumed_from_step"] == 40, "the TrainJob continued from the PyTorchJob's checkpoint"
    assert first_report["last_checkpoint"] == f"{location}/step-00000040", first_report
    assert second_report["last_checkpoint"] == f"{location}/step-00000080", second_report
    assert second_report["metrics"]["accuracy"] > 0.5


def test_the_trainjob_launcher_emits_its_metrics_and_model(
    kfp_env: Path, namespace: str, kubectl: Kubectl
) -> None:
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(REPO / "examples" / "trainjob-runtime-local.yaml"),
    )
    task = trainjob_launcher(
        runtime="torch-distributed-local",
        job_name="tj",
        namespace=namespace,
        image="kubetrain/kubetrain:0.1.0",
        command=["torchrun", "examples/train_ddp.py", "--checkpoint-every=20"],
        args=["--steps=40"],
        num_nodes=1,
        checkpoint_dir="/checkpoints",
    )
    assert task.outputs["state"] == "Succeeded"
    assert task.outputs["last_checkpoint"] == "/checkpoints/step-00000040"
    assert task.outputs["metrics"].metadata["accuracy"] > 0.3
    # The loss curve rank 0 logged, drawn as the step's HTML artifact.
    page = Path(task.outputs["curves"].path).read_text()
    assert "attempts: tj-" in page and '<img alt="metric curves of ' in page, page[:500]
    image = page.split("data:image/png;base64,", 1)[1].split('"', 1)[0]
    assert base64.b64decode(image)[:4] == b"\x89PNG"
    model = task.outputs["model"]
    assert json.loads(Path(model.path).read_text())["checkpoint"] == "/checkpoints/step-00000040"


def test_a_failing_job_fails_the_step_with_its_reason(kfp_env: Path, namespace: str) -> None:
    request = training_step(namespace, "broken", "--steps=40", "--fail-at-step=5", backoff_limit=0)
    with pytest.raises(JobFailedError) as failed:
        launch(request)
    assert failed.value.reason == "BackoffLimitExceeded"
    assert "injected failure step=5" in failed.value.logs


def test_a_retried_step_resumes_the_failed_attempt_from_its_checkpoint(
    kfp_env: Path, namespace: str, kubectl: Kubectl, jobs: JobClient
) -> None:
    claim(kubectl, namespace, "ckpt")
    request = training_step(
        namespace,
        "resumable",
        "--steps=60",
        "--fail-at-step=50",
        "--fail-on-attempt=1",
        backoff_limit=0,
        checkpoint_dir="/checkpoints",
        checkpoint_volume="ckpt",
    )
    with pytest.raises(JobFailedError):
        launch(request)
    result = launch(request)  # what set_retry does: the same step, the same inputs
    assert result.state == "Succeeded"
    assert result.report["attempt"] == "2" and result.report["resumed_from_step"] == 40
    attempts = sorted(j["metadata"]["name"] for j in jobs.list(kind="PyTorchJob", namespace=namespace))
    assert len(attempts) == 2 and attempts[0].endswith("-a1") and attempts[1].endswith("-a2")


def endless_step(namespace: str) -> LaunchRequest:
    """A step whose job trains until it is stopped."""
    return training_step(namespace, "endless", "--steps=100000", "--step-seconds=0.05", task_name="train")


def start_step(request: LaunchRequest, jobs: JobClient, **env: str) -> subprocess.Popen[bytes]:
    """Run the step as its pod would, in a process of its own; return once its job exists."""
    script = (
        "from kubetrain.components.launch import LaunchRequest, launch\n"
        f"launch(LaunchRequest(**{dataclasses.asdict(request)!r}))\n"
    )
    step = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, **env})
    deadline = time.monotonic() + 60
    while not jobs.list(kind="PyTorchJob", namespace=request.namespace):
        assert time.monotonic() < deadline and step.poll() is None, "the step did not submit its job"
        time.sleep(0.5)
    time.sleep(3)
    return step


def test_a_cancelled_step_deletes_its_job(kfp_env: Path, namespace: str, jobs: JobClient) -> None:
    step = start_step(endless_step(namespace), jobs)
    step.send_signal(signal.SIGTERM)  # what KFP does to a cancelled step's pod
    assert step.wait(30) == 143
    deadline = time.monotonic() + 60
    while jobs.list(kind="PyTorchJob", namespace=namespace):
        assert time.monotonic() < deadline, "the cancelled step's job is still there"
        time.sleep(0.5)


def test_a_step_whose_pod_the_cluster_evicts_leaves_its_job_to_the_retry(
    kfp_env: Path, namespace: str, jobs: JobClient
) -> None:
    # The step's own pod, as KFP runs it (KFP_POD_NAME); held by a finalizer so it can still be read.
    core = jobs.aio.core
    pod = {
        "metadata": {"name": "step-pod", "finalizers": ["example.com/hold"]},
        "spec": {"containers": [{"name": "main", "image": "example.com/step:1"}]},
    }
    jobs.run(core.create_namespaced_pod(namespace, pod))
    try:
        request = endless_step(namespace)
        step = start_step(request, jobs, KFP_POD_NAME="step-pod")
        (job,) = jobs.list(kind="PyTorchJob", namespace=namespace)
        # A node drain: the Eviction API marks the pod (DisruptionTarget), then its containers get SIGTERM.
        eviction = {"metadata": {"name": "step-pod", "namespace": namespace}}
        jobs.run(core.create_namespaced_pod_eviction("step-pod", namespace, eviction))
        time.sleep(1)
        step.send_signal(signal.SIGTERM)
        assert step.wait(30) == 143
        left = jobs.get("PyTorchJob", job["metadata"]["name"], namespace)
        assert left is not None and not left["metadata"].get("deletionTimestamp"), "the job keeps training"
        retried = jobs.prepare_attempt(request.lineage_request(namespace), log=lambda line: None)
        assert retried.job["metadata"]["uid"] == job["metadata"]["uid"], "the retry reattaches to it"
    finally:
        patch = [{"op": "remove", "path": "/metadata/finalizers"}]
        jobs.run(core.patch_namespaced_pod("step-pod", namespace, patch))


def test_a_pipeline_step_knows_its_run_and_task_without_being_told(tmp_path: Path) -> None:
    @dsl.pipeline
    def steps():  # no return annotation: KFP reads it, and this module's annotations are strings
        pytorchjob_launcher(image="example.com/train:1")
        pytorchjob_launcher(image="example.com/train:1", job_name="digits", run_id="nightly")

    target = tmp_path / "steps.yaml"
    compiler.Compiler().compile(steps, str(target))
    tasks = yaml.safe_load(target.read_text())["root"]["dag"]["tasks"]
    given = {
        name: {k: v["runtimeValue"]["constant"] for k, v in task["inputs"]["parameters"].items()}
        for name, task in tasks.items()
    }
    assert given["pytorchjob-launcher"]["run_id"] == dsl.PIPELINE_JOB_ID_PLACEHOLDER
    assert given["pytorchjob-launcher"]["task_name"] == dsl.PIPELINE_TASK_NAME_PLACEHOLDER
    assert given["pytorchjob-launcher-2"]["run_id"] == "nightly", "a run_id given is kept"


def test_each_pipeline_run_gets_its_own_job_under_the_same_job_name(
    kfp_env: Path, namespace: str, jobs: JobClient
) -> None:
    quick = pytorchjob("digits", workers=0, master_annotations=runs_for("1s"))

    @dsl.pipeline
    def nightly():  # (as above)
        pytorchjob_launcher(job_name="digits", namespace=namespace, manifest=quick, wait_timeout=120.0)

    nightly()
    nightly()  # the next night: a new run of the same pipeline
    found = jobs.list(kind="PyTorchJob", namespace=namespace)
    assert len(found) == 2, [j["metadata"]["name"] for j in found]
    identities = [json.loads(j["metadata"]["annotations"]["kubetrain.dev/identity"]) for j in found]
    assert {i["task_name"] for i in identities} == {"pytorchjob-launcher"}
    assert len({i["run_id"] for i in identities}) == 2 and not any("{{" in i["run_id"] for i in identities)
    assert all(j["metadata"]["name"].startswith("digits-") for j in found)
