"""Helpers shared by the tests (and the benchmarks): run the controller, build and submit jobs, wait for
things, a clock that moves only when told."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes_asyncio import client, watch

from kubetrain.api import kinds
from kubetrain.controller import metrics
from kubetrain.controller.main import Manager, Options
from kubetrain.devcluster.cluster import DevCluster
from kubetrain.kube.client import KubeClient

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.1,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")


def running_cluster_with(state_dir: str, *options: str) -> DevCluster | None:
    """The cluster of ``state_dir`` when it is up and was started with each of ``options`` (fields of
    ``ClusterOptions``), for suites that need a cluster of their own kind."""
    cluster = DevCluster(Path(state_dir).expanduser())
    state = cluster.load_state() if cluster.is_up() else None
    return cluster if state is not None and all(state.options.get(o) for o in options) else None


def kubeconfig_of(admin: Path, token: str, target: Path) -> Path:
    """``admin``'s kubeconfig with its user replaced by ``token`` (a ServiceAccount's), written to
    ``target``: a controller run with only that account's RBAC."""
    config = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": "controller", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "controller"
    target.write_text(yaml.safe_dump(config))
    return target


def controller_command(namespace: str, *args: str, metrics_address: str = "0") -> list[str]:
    """The ``kubetrain controller run`` command line for one namespace (no health probe; metrics only
    where ``metrics_address`` says), with this interpreter."""
    return [
        sys.executable,
        "-m",
        "kubetrain",
        "controller",
        "run",
        "--namespace",
        namespace,
        "--metrics-bind-address",
        metrics_address,
        "--health-probe-bind-address",
        "0",
        *args,
    ]


def start_controller_process(
    kubeconfig: Path, namespace: str, log: Path, *args: str, pod_name: str = ""
) -> subprocess.Popen[bytes]:
    """``kubetrain controller run`` for one namespace as a process of its own (its output appended to
    ``log``), for tests that kill it, freeze it, or block their own thread."""
    with log.open("ab") as out:
        return subprocess.Popen(
            controller_command(namespace, *args),
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAME": pod_name},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_controller_started(proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Until the controller process of ``start_controller_process`` logs that it runs."""
    deadline = time.monotonic() + timeout
    while "controller started" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the controller did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)


class ControllerHandle:
    """An in-process controller scoped to one namespace, started and stopped by the test."""

    def __init__(self, kubeconfig: Path, **overrides: Any) -> None:
        self.options = Options(
            kubeconfig=str(kubeconfig), metrics_bind_address="0", health_probe_bind_address="0", **overrides
        )
        self.manager: Manager | None = None

    async def start(self) -> None:
        kube = await KubeClient.from_kubeconfig(
            self.options.kubeconfig, qps=self.options.kube_api_qps, burst=self.options.kube_api_burst
        )
        self.manager = Manager(kube, self.options)
        await self.manager.start()

    async def stop(self) -> None:
        if self.manager is not None:
            await self.manager.stop()
            await self.manager.kube.close()
            self.manager = None


class FakeClock:
    """Monotonic time for unit tests: it moves only when the test sets ``now`` or someone sleeps."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def metric(name: str, **labels: str) -> float:
    """Current value of a controller metric (0 when the series does not exist yet)."""
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


class Jobs:
    """Create and inspect training jobs of one namespace."""

    def __init__(self, custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> None:
        self.custom = custom
        self.core = core
        self.namespace = namespace

    @staticmethod
    def _resource(kind: str) -> tuple[str, str, str]:
        found = kinds.any_kind(kind)
        return found.group, found.version, found.plural

    async def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        group, version, plural = self._resource(manifest["kind"])
        body = copy.deepcopy(manifest)
        created: dict[str, Any] = await self.custom.create_namespaced_custom_object(
            group, version, self.namespace, plural, body
        )
        return created

    async def get(self, name: str, kind: str = "PyTorchJob") -> dict[str, Any] | None:
        group, version, plural = self._resource(kind)
        try:
            job: dict[str, Any] = await self.custom.get_namespaced_custom_object(
                group, version, self.namespace, plural, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return job

    async def patch(self, name: str, body: dict[str, Any], kind: str = "PyTorchJob") -> None:
        group, version, plural = self._resource(kind)
        await self.custom.patch_namespaced_custom_object(
            group, version, self.namespace, plural, name, body, _content_type="application/merge-patch+json"
        )

    async def delete(self, name: str, kind: str = "PyTorchJob") -> None:
        group, version, plural = self._resource(kind)
        await self.custom.delete_namespaced_custom_object(group, version, self.namespace, plural, name)

    async def wait_condition(
        self, name: str, ctype: str, *, kind: str = "PyTorchJob", timeout: float = 30, status: str = "True"
    ) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            job = await self.get(name, kind)
            for condition in ((job or {}).get("status") or {}).get("conditions") or []:
                if condition["type"] == ctype and condition["status"] == status:
                    return job
            return None

        try:
            return await eventually(probe, timeout=timeout, what=f"{kind} {name} to have {ctype}={status}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await self.describe(name, kind)}") from None

    async def saw_condition(
        self, name: str, ctype: str, *, kind: str = "PyTorchJob", timeout: float = 30
    ) -> dict[str, Any]:
        """The first version of the job with ``ctype`` True, seen through a watch: for a condition that
        may be on record for milliseconds only (``Restarting`` while kwok recreates and runs a pod at
        once), which polling can miss pass after pass. A watch the API server refuses for a while (429
        while the watch cache of a CRD just installed initializes) is opened again."""
        group, version, plural = self._resource(kind)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    stream = watch.Watch().stream(
                        self.custom.list_namespaced_custom_object,
                        group,
                        version,
                        self.namespace,
                        plural,
                        field_selector=f"metadata.name={name}",
                    )
                    try:
                        async for event in stream:
                            job: dict[str, Any] = event["object"]
                            for condition in (job.get("status") or {}).get("conditions") or []:
                                if condition["type"] == ctype and condition["status"] == "True":
                                    return job
                    except client.ApiException as exc:
                        if exc.status != 429:
                            raise
                    await asyncio.sleep(0.2)
        except TimeoutError:
            pass
        raise AssertionError(f"{kind} {name} never had {ctype}=True\n{await self.describe(name, kind)}")

    async def describe(self, name: str, kind: str = "PyTorchJob") -> str:
        """The job's status and each pod of the namespace in a line: what a timed-out wait leaves to read
        when the cluster is gone by the time anyone looks."""
        job = await self.get(name, kind)
        lines = [f"{kind} {name} status: {json.dumps((job or {}).get('status'), sort_keys=True)}"]
        for pod in (await self.core.list_namespaced_pod(self.namespace)).items:
            conditions = ",".join(
                f"{c.type}={c.status}:{c.reason or ''}" for c in pod.status.conditions or []
            )
            restarts = sum(c.restart_count or 0 for c in pod.status.container_statuses or [])
            lines.append(
                f"pod {pod.metadata.name} uid={pod.metadata.uid} phase={pod.status.phase} "
                f"deleting={pod.metadata.deletion_timestamp} node={pod.spec.node_name} "
                f"restarts={restarts} conditions={conditions}"
            )
        return "\n".join(lines)

    async def run_to_ttl_deletion(
        self, name: str, *, runs: str, ttl_seconds: int, timeout: float = 30
    ) -> None:
        """Submit a PyTorchJob of a Master and a Worker whose pods succeed after ``runs``; wait (up to
        ``timeout`` for each) until it has succeeded and until its TTL of ``ttl_seconds`` has deleted it.
        ``Succeeded`` is seen through a watch started before the job: a short TTL can delete the job
        between two polls."""
        run_policy = {"ttlSecondsAfterFinished": ttl_seconds}
        succeeded = asyncio.create_task(self.saw_condition(name, "Succeeded", timeout=timeout))
        await self.create(pytorchjob(name, workers=1, pod_annotations=runs_for(runs), run_policy=run_policy))
        await succeeded

        async def deleted() -> bool:
            return await self.get(name) is None

        await eventually(deleted, timeout=timeout, what=f"the TTL to delete PyTorchJob {name}")

    async def pods(self, job: str | None = None) -> list[client.V1Pod]:
        selector = f"training.kubeflow.org/job-name={job}" if job else None
        listed = await self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        return list(listed.items)

    async def trainjob_pods(self, name: str, *, live: bool = True) -> list[client.V1Pod]:
        listed = await self.core.list_namespaced_pod(
            self.namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
        )
        return [p for p in listed.items if not (live and p.metadata.deletion_timestamp)]

    async def wait_trainjob_pods(
        self, name: str, count: int, *, phase: str | None = None, timeout: float = 30
    ) -> list[client.V1Pod]:
        return await _count_of(lambda: self.trainjob_pods(name), count, phase, timeout, f"TrainJob {name}")

    async def live_pods(self, job: str) -> list[client.V1Pod]:
        """The job's pods that are not being deleted."""
        return [p for p in await self.pods(job) if not p.metadata.deletion_timestamp]

    async def set_pod_status(self, pod: str, status: dict[str, Any]) -> None:
        """Write a pod's status the way its kubelet reports it (kwok leaves hanging pods alone)."""
        await self.core.patch_namespaced_pod_status(pod, self.namespace, {"status": status})

    async def services(self, job: str | None = None) -> list[client.V1Service]:
        selector = f"training.kubeflow.org/job-name={job}" if job else None
        listed = await self.core.list_namespaced_service(self.namespace, label_selector=selector)
        return list(listed.items)

    async def wait_pods(
        self, job: str, count: int, *, phase: str | None = None, timeout: float = 30
    ) -> list[Any]:
        return await _count_of(lambda: self.live_pods(job), count, phase, timeout, job)

    async def events(self, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the Events about a job, oldest first."""
        listed = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        )
        ordered = sorted(
            listed.items, key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name)
        )
        return [(e.type, e.reason, e.message) for e in ordered]

    async def wait_event(self, name: str, reason: str, timeout: float = 30) -> tuple[str, str, str]:
        async def probe() -> tuple[str, str, str] | None:
            return next((e for e in await self.events(name) if e[1] == reason), None)

        return await eventually(probe, timeout=timeout, what=f"event {reason} on {name}")


async def _count_of(
    live_pods: Callable[[], Awaitable[list[client.V1Pod]]],
    count: int,
    phase: str | None,
    timeout: float,
    of: str,
) -> list[client.V1Pod]:
    """Once ``count`` of the live pods (in ``phase``, if given) are there: those pods."""

    async def probe() -> list[client.V1Pod] | None:
        pods = [p for p in await live_pods() if phase is None or p.status.phase == phase]
        return pods if len(pods) == count else None

    return await eventually(
        probe, timeout=timeout, what=f"{count} pods of {of}" + (f" {phase}" if phase else "")
    )


def pytorchjob(
    name: str,
    *,
    workers: int = 2,
    master: bool = True,
    restart_policy: str = "OnFailure",
    annotations: dict[str, str] | None = None,
    pod_annotations: dict[str, str] | None = None,
    master_annotations: dict[str, str] | None = None,
    worker_annotations: dict[str, str] | None = None,
    gpus: int = 0,
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A PyTorchJob whose simulated pods behave as the annotations say: ``pod_annotations`` those of
    every replica, ``master_annotations`` and ``worker_annotations`` those of one replica type."""

    def replica(count: int, pod_annotations: dict[str, str] | None) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "pytorch",
            "image": "example.com/train:1",
            "ports": [{"name": "pytorchjob-port", "containerPort": 8080}],
        }
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        return {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {
                "metadata": {"annotations": dict(pod_annotations or {})},
                "spec": {"containers": [container]},
            },
        }

    replicas: dict[str, Any] = {}
    if master:
        replicas["Master"] = replica(1, master_annotations or pod_annotations)
    if workers:
        replicas["Worker"] = replica(workers, worker_annotations or pod_annotations)
    job_spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas, **spec}
    if run_policy:
        job_spec["runPolicy"] = run_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": job_spec,
    }


def condition(job: dict[str, Any], ctype: str) -> dict[str, Any]:
    """The job's condition of type ``ctype`` (it must have one)."""
    found: dict[str, Any] = next(c for c in job["status"]["conditions"] if c["type"] == ctype)
    return found


HANG = {"sim.kubetrain.dev/outcome": "hang"}

# A progress report as the status server stores it (kubetrain.progress, the kubeflow SDK): step 400 of
# 1000, 40 %, 90 s left, a loss, and a metric that is not a number.
TRAINER_REPORT = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 90,
    "metrics": [
        {"name": "currentStep", "value": "400"},
        {"name": "totalSteps", "value": "1000"},
        {"name": "loss", "value": "0.25"},
        {"name": "phase", "value": "warmup"},
    ],
}


def runs_for(duration: str) -> dict[str, str]:
    return {"sim.kubetrain.dev/run-duration": duration}


def fails(code: int = 1, after: str = "1s", reason: str = "Error") -> dict[str, str]:
    return {
        "sim.kubetrain.dev/outcome": "fail",
        "sim.kubetrain.dev/exit-code": str(code),
        "sim.kubetrain.dev/run-duration": after,
        "sim.kubetrain.dev/reason": reason,
    }


def training_runtime(
    name: str,
    *,
    policy: str | None = "torch",
    pod_annotations: dict[str, str] | None = None,
    initializer: dict[str, str] | None = None,
    backoff_limit: int | None = None,
    **jobset_spec: Any,
) -> dict[str, Any]:
    """A namespaced TrainingRuntime with a trainer job ``node`` whose simulated pods behave as
    ``pod_annotations`` say; ``initializer`` (pod annotations) adds a dataset initializer that the
    trainer depends on (Complete)."""

    def job(job_name: str, ancestor: str, annotations: dict[str, str] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "template": {
                "metadata": {"annotations": dict(annotations or {})},
                "spec": {
                    "containers": [
                        {
                            "name": job_name if ancestor != "trainer" else "node",
                            "image": "example.com/train:1",
                        }
                    ]
                },
            }
        }
        if backoff_limit is not None:
            spec["backoffLimit"] = backoff_limit
        return {
            "name": job_name,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
                "spec": spec,
            },
        }

    jobs = [job("node", "trainer", pod_annotations)]
    if initializer is not None:
        jobs.insert(0, job("dataset-initializer", "dataset-initializer", initializer))
        jobs[1]["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": jobs, **jobset_spec}}}
    if policy is not None:
        spec["mlPolicy"] = {"numNodes": 1, policy: {}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": policy or "plain"}},
        "spec": spec,
    }


def claims_runtime(name: str, *, output_retained: bool, trains_for: str = "1s") -> dict[str, Any]:
    """A runtime shaped like the torchtune ones: an initializer step, then the trainer; a ``scratch``
    claim (downloads, deleted with the TrainJob) at /workspace and an ``output`` claim at /workspace/output."""
    runtime = training_runtime(name, pod_annotations=runs_for(trains_for), initializer=runs_for("1s"))
    spec = runtime["spec"]["template"]["spec"]
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    output: dict[str, Any] = {"templates": [{"metadata": {"name": "output"}, "spec": claim_spec}]}
    if output_retained:
        output["retentionPolicy"] = {"whenDeleted": "Retain"}
    spec["volumeClaimPolicies"] = [
        {"templates": [{"metadata": {"name": "scratch"}, "spec": claim_spec}]},
        output,
    ]
    for rjob in spec["replicatedJobs"]:
        (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
        container["volumeMounts"] = [{"name": "scratch", "mountPath": "/workspace"}]
        if rjob["name"] == "node":
            container["volumeMounts"].append({"name": "output", "mountPath": "/workspace/output"})
    return runtime


def trainjob(
    name: str,
    runtime: str,
    *,
    annotations: dict[str, str] | None = None,
    kind: str = "TrainingRuntime",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {"runtimeRef": {"name": runtime, "kind": kind}, **spec},
    }


def runtime_patch(pod_template: dict[str, Any], *, manager: str = "example.com/platform") -> dict[str, Any]:
    """A TrainJob ``runtimePatches`` entry of ``manager`` that merges ``pod_template`` (metadata and
    spec) into the pods of the runtime's replicated job ``node``."""
    node = {"name": "node", "template": {"spec": {"template": pod_template}}}
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node]}}}}


def _per_node(resource: str, count: float) -> dict[str, Any]:
    return {"limits": {resource: count}, "requests": {resource: count}}


# What the kubeflow 0.5 SDK's ``BuiltinTrainer(config=TorchTuneConfig(...))`` sends as ``spec.trainer``
# (its get_trainer_cr_from_builtin_trainer; resources as it writes them: floats, requests and limits).
TORCHTUNE_SDK: dict[str, dict[str, Any]] = {
    "empty": {"command": ["tune", "run"], "args": []},  # TorchTuneConfig()
    "full": {  # dtype=BF16, batch_size=2, epochs=1, loss=CEWithChunkedOutputLoss, resources_per_node={"gpu": 2}
        "command": ["tune", "run"],
        "args": [
            "dtype=bf16",
            "batch_size=2",
            "epochs=1",
            "loss=torchtune.modules.loss.CEWithChunkedOutputLoss",
        ],
        "resourcesPerNode": _per_node("nvidia.com/gpu", 2.0),
    },
    "lora": {  # peft_config=LoraConfig(lora_rank=8, lora_alpha=16), resources_per_node={"gpu": 2}
        "command": ["tune", "run"],
        "args": [
            "model.lora_rank=8",
            "model.lora_alpha=16",
            "model.lora_attn_modules=[q_proj,v_proj,output_proj]",
        ],
        "resourcesPerNode": _per_node("nvidia.com/gpu", 2.0),
    },
    "qlora": {  # peft_config=LoraConfig(quantize_base=True), resources_per_node={"gpu": 1}
        "command": ["tune", "run"],
        "args": ["model.quantize_base=True", "model.lora_attn_modules=[q_proj,v_proj,output_proj]"],
        "resourcesPerNode": _per_node("nvidia.com/gpu", 1.0),
    },
    # dataset_preprocess_config=TorchTuneInstructDataset(source=DataFormat.PARQUET, split="train[:10%]"), with
    # Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"))
    "dataset": {
        "command": ["tune", "run"],
        "args": [
            "dataset.data_dir=/workspace/dataset/data",
            "dataset=torchtune.datasets.instruct_dataset",
            "dataset.source=parquet",
            "dataset.split=train[:10%]",
        ],
    },
}
# The same, with resources_per_node={"cpu": 2}.
TORCHTUNE_SDK["cpu"] = {**TORCHTUNE_SDK["dataset"], "resourcesPerNode": _per_node("cpu", 2.0)}
