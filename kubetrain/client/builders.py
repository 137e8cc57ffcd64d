"""Job manifests from a handful of arguments, checked before anything is submitted.

The Airflow operators and the KFP components accept either a full manifest or
these convenience arguments; both end up here. Every argument is checked on its
own first, and a bad one raises ``InvalidJobError`` naming it and saying what
would be right, long before a cluster is involved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming, quantity
from kubetrain.api import kinds as registry
from kubetrain.client import kinds
from kubetrain.client.errors import InvalidJobError
from kubetrain.locations import is_url, location_problem

Obj = dict[str, Any]
RESTART_POLICIES = ("OnFailure", "Always", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
RUNTIME_KINDS = tuple(k.kind for k in registry.RUNTIMES)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidJobError(message)


def _non_negative(name: str, value: int | None) -> None:
    if value is not None:
        _require(
            isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            f"{name} must be a whole number >= 0 (got {value!r})",
        )


def _strings(name: str, value: Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    _require(
        not isinstance(value, str) and all(isinstance(v, str) for v in value),
        f"{name} must be a list of strings, e.g. ['python', 'train.py'] (got {value!r})",
    )
    return list(value)


def _env(value: Mapping[str, Any] | Sequence[Obj] | None) -> list[Obj]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        for key in value:
            _require(isinstance(key, str) and key != "", f"env names must be non-empty strings (got {key!r})")
        return [{"name": k, "value": str(v)} for k, v in value.items()]
    _require(
        all(isinstance(e, Mapping) and "name" in e for e in value),
        "env must be a mapping of name to value, or a list of Kubernetes EnvVar objects",
    )
    return [dict(e) for e in value]


def _resources(name: str, value: Mapping[str, Any] | None, gpus: int) -> Obj:
    resources: Obj = {}
    if value:
        _require(
            set(value) <= {"requests", "limits"}
            or all(isinstance(v, str | int | float) for v in value.values()),
            f"{name} must be {{'requests': {{...}}, 'limits': {{...}}}} or a flat mapping such as "
            "{'cpu': '4', 'memory': '16Gi'}",
        )
        if set(value) <= {"requests", "limits"}:
            resources = {k: dict(v) for k, v in value.items()}
        else:
            resources = {"requests": dict(value), "limits": dict(value)}
        for kind, amounts in resources.items():
            for resource, amount in amounts.items():
                try:
                    quantity.parse(amount)
                except ValueError:
                    raise InvalidJobError(
                        f"{name}.{kind}.{resource}: {amount!r} is not a Kubernetes quantity "
                        "(e.g. 2, 500m, 16Gi)"
                    ) from None
    if gpus:
        resources.setdefault("limits", {})[naming.GPU_RESOURCE] = str(gpus)
    return resources


_QUEUE_LABEL_VALUE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")


def queue_labels(queue_name: str | None, priority_class: str | None) -> dict[str, str]:
    """The labels that put a job in a Kueue LocalQueue and give it a WorkloadPriorityClass.

    Kueue reads them when the job is created (its webhook suspends the job until the queue admits it);
    both name objects, so both must be lowercase DNS names that fit a label value.
    """
    labels: dict[str, str] = {}
    for argument, names, label, value in (
        ("queue_name", "LocalQueue", naming.LABEL_KUEUE_QUEUE_NAME, queue_name),
        ("priority_class", "WorkloadPriorityClass", naming.LABEL_KUEUE_PRIORITY_CLASS, priority_class),
    ):
        if value is None or value == "":
            continue
        _require(
            isinstance(value, str) and _QUEUE_LABEL_VALUE.fullmatch(value) is not None,
            f"{argument} must name a Kueue {names}: lowercase letters, digits, '-' and '.', at most 63 "
            f"characters (got {value!r})",
        )
        labels[label] = value
    return labels


@dataclass
class JobSpec:
    """Arguments common to every kind (the operators' and components' convenience arguments)."""

    name: str
    image: str
    command: Sequence[str] | None = None
    args: Sequence[str] | None = None
    env: Mapping[str, Any] | Sequence[Obj] | None = None
    gpus: int = 0
    resources: Mapping[str, Any] | None = None
    checkpoint_dir: str | None = None
    checkpoint_volume: str | None = None
    checkpoint_secret: str | None = (
        None  # a Secret whose keys become the containers' env (object-store credentials)
    )
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    stall_timeout_seconds: int | None = None
    clean_pod_policy: str | None = None
    restart_policy: str = "OnFailure"
    scheduling: Mapping[str, Any] | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Obj] | None = None
    working_dir: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    suspend: bool = False

    def check(self) -> None:
        """Raise ``InvalidJobError`` naming the first bad argument."""
        _require(
            bool(self.name) and naming.dns_label(self.name, limit=63) == self.name,
            f"name must be a DNS-1035 label such as 'mnist-train' (got {self.name!r})",
        )
        _require(
            isinstance(self.image, str) and self.image.strip() != "",
            "image is required: the container image that runs the training code",
        )
        _strings("command", self.command)
        _strings("args", self.args)
        _env(self.env)
        _non_negative("gpus", self.gpus)
        _resources("resources", self.resources, 0)
        for argument in ("ttl_seconds_after_finished", "active_deadline_seconds", "backoff_limit"):
            _non_negative(argument, getattr(self, argument))
        if self.active_deadline_seconds is not None:
            _require(self.active_deadline_seconds >= 1, "active_deadline_seconds must be at least 1")
        if self.stall_timeout_seconds is not None:
            _require(
                self.stall_timeout_seconds >= 1,
                "stall_timeout_seconds must be at least 1: seconds without a progress report before the "
                "job's pods are restarted",
            )
        _require(
            self.clean_pod_policy in (None, *CLEAN_POD_POLICIES),
            f"clean_pod_policy must be one of {', '.join(CLEAN_POD_POLICIES)} (got {self.clean_pod_policy!r})",
        )
        _require(
            self.restart_policy in RESTART_POLICIES,
            f"restart_policy must be one of {', '.join(RESTART_POLICIES)} (got {self.restart_policy!r})",
        )
        _require(
            self.checkpoint_volume is None or bool(self.checkpoint_dir),
            "checkpoint_volume needs checkpoint_dir: the path where the volume is mounted in the pods",
        )
        problem = None if self.checkpoint_dir is None else location_problem(self.checkpoint_dir)
        _require(problem is None, f"checkpoint_dir must be {problem} (got {self.checkpoint_dir!r})")
        _require(
            not (self.checkpoint_volume and self.checkpoint_dir and is_url(self.checkpoint_dir)),
            "checkpoint_volume is a claim mounted at a path; an object-store checkpoint_dir needs none "
            "(give its credentials with checkpoint_secret)",
        )
        _require(
            self.checkpoint_secret is None or bool(self.checkpoint_dir),
            "checkpoint_secret needs checkpoint_dir: the location whose credentials it holds",
        )
        if self.scheduling:
            allowed = {"min_available", "queue", "priority_class", "schedule_timeout_seconds"}
            unknown = set(self.scheduling) - allowed
            _require(not unknown, f"scheduling has unknown keys {sorted(unknown)}; use {sorted(allowed)}")

    def metadata(self) -> Obj:
        annotations = dict(self.annotations)
        if self.checkpoint_dir:
            annotations[naming.ANNOTATION_CHECKPOINT_DIR] = self.checkpoint_dir
        if self.checkpoint_volume:
            annotations[naming.ANNOTATION_CHECKPOINT_VOLUME] = self.checkpoint_volume
        if self.checkpoint_secret:
            annotations[naming.ANNOTATION_CHECKPOINT_SECRET] = self.checkpoint_secret
        if self.stall_timeout_seconds:
            annotations[naming.ANNOTATION_STALL_TIMEOUT] = str(self.stall_timeout_seconds)
        return {"name": self.name, "labels": dict(self.labels), "annotations": annotations}

    def container(self, name: str) -> Obj:
        container: Obj = {"name": name, "image": self.image}
        if self.command:
            container["command"] = list(self.command)
        if self.args:
            container["args"] = list(self.args)
        env = _env(self.env)
        if env:
            container["env"] = env
        resources = _resources("resources", self.resources, self.gpus)
        if resources:
            container["resources"] = resources
        if self.working_dir:
            container["workingDir"] = self.working_dir
        return container

    def pod_spec(self, container: str) -> Obj:
        spec: Obj = {"containers": [self.container(container)]}
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        return spec

    def run_policy(self) -> Obj:
        policy: Obj = {}
        for key, value in (
            ("ttlSecondsAfterFinished", self.ttl_seconds_after_finished),
            ("activeDeadlineSeconds", self.active_deadline_seconds),
            ("backoffLimit", self.backoff_limit),
            ("cleanPodPolicy", self.clean_pod_policy),
        ):
            if value is not None:
                policy[key] = value
        if self.scheduling:
            names = {
                "min_available": "minAvailable",
                "queue": "queue",
                "priority_class": "priorityClass",
                "schedule_timeout_seconds": "scheduleTimeoutSeconds",
            }
            policy["schedulingPolicy"] = {names[k]: v for k, v in self.scheduling.items()}
        if self.suspend:
            policy["suspend"] = True
        return policy


def v1_job(kind: str, spec: JobSpec, *, replicas: Mapping[str, int]) -> Obj:
    """A v1 job (PyTorchJob, TFJob, ...) with ``replicas`` per replica type, all from one pod template."""
    spec.check()
    _require(
        kinds.kind_of(kind).is_v1,
        f"kind must be a {registry.KUBEFLOW_GROUP}/{registry.KUBEFLOW_VERSION} kind (got {kind!r}); "
        "use trainjob() for TrainJob",
    )
    job_kind = registry.v1_kind(kind)
    for rtype, count in replicas.items():
        _non_negative(f"replicas of {rtype}", count)
    container = job_kind.default_container
    replica_specs = {
        rtype: {
            "replicas": count,
            "restartPolicy": spec.restart_policy,
            "template": {"spec": spec.pod_spec(container)},
        }
        for rtype, count in replicas.items()
        if count > 0 or rtype == "Master"
    }
    body: Obj = {
        "apiVersion": job_kind.api_version,
        "kind": job_kind.kind,
        "metadata": spec.metadata(),
        "spec": {job_kind.replica_field: replica_specs},
    }
    policy = spec.run_policy()
    if policy:
        body["spec"]["runPolicy"] = policy
    return body


def pytorchjob(
    spec: JobSpec, *, num_workers: int = 1, master: bool = True, nproc_per_node: str | int | None = None
) -> Obj:
    """A PyTorchJob: one Master (unless ``master=False``) and ``num_workers`` Workers."""
    _non_negative("num_workers", num_workers)
    _require(master or num_workers >= 1, "num_workers must be at least 1 when there is no Master")
    replicas = {"Master": 1} if master else {}
    if num_workers:
        replicas["Worker"] = num_workers
    body = v1_job("PyTorchJob", spec, replicas=replicas)
    if nproc_per_node is not None:
        text = str(nproc_per_node)
        _require(
            text in ("auto", "cpu", "gpu") or (text.isdigit() and int(text) > 0),
            f"nproc_per_node must be auto, cpu, gpu or a positive integer (got {nproc_per_node!r})",
        )
        body["spec"]["nprocPerNode"] = text
    return body


def trainjob(
    spec: JobSpec,
    *,
    runtime: str,
    runtime_kind: str = "ClusterTrainingRuntime",
    num_nodes: int | None = None,
    num_proc_per_node: int | None = None,
) -> Obj:
    """A TrainJob on ``runtime``; the image, command, env and resources go to the trainer's ``node`` container."""
    spec.check()
    _require(
        bool(runtime), "runtime is required: the (Cluster)TrainingRuntime to run on, e.g. torch-distributed"
    )
    _require(
        runtime_kind in RUNTIME_KINDS,
        f"runtime_kind must be {' or '.join(RUNTIME_KINDS)} (got {runtime_kind!r})",
    )
    _non_negative("num_nodes", num_nodes)
    if num_proc_per_node is not None:
        _require(num_proc_per_node >= 1, f"num_proc_per_node must be at least 1 (got {num_proc_per_node})")
    metadata = spec.metadata()
    if spec.ttl_seconds_after_finished is not None:
        metadata["annotations"][naming.ANNOTATION_TTL_AFTER_FINISHED] = str(spec.ttl_seconds_after_finished)
    body: Obj = {
        "apiVersion": registry.TRAINJOB.api_version,
        "kind": registry.TRAINJOB.kind,
        "metadata": metadata,
        "spec": {
            "runtimeRef": {"name": runtime, "kind": runtime_kind},
            "trainer": _trainer(spec, num_nodes, num_proc_per_node),
        },
    }
    if spec.active_deadline_seconds is not None:
        body["spec"]["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if spec.suspend:
        body["spec"]["suspend"] = True
    placement: Obj = {}
    if spec.node_selector:
        placement["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        placement["tolerations"] = [dict(t) for t in spec.tolerations]
    if placement:
        body["spec"]["runtimePatches"] = [_node_pod_patch(placement)]
    return body


def _trainer(spec: JobSpec, num_nodes: int | None, num_proc_per_node: int | None) -> Obj:
    """A TrainJob's ``trainer``: the image, and what ``spec`` gives the ``node`` container."""
    container = spec.container(registry.TRAINJOB.default_container)
    trainer: Obj = {"image": spec.image}
    for key in ("command", "args", "env"):
        if key in container:
            trainer[key] = container[key]
    if "resources" in container:
        trainer["resourcesPerNode"] = container["resources"]
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    if num_proc_per_node is not None:
        trainer["numProcPerNode"] = num_proc_per_node
    return trainer


def _node_pod_patch(pod_spec: Obj) -> Obj:
    """A runtime patch (ours) that merges ``pod_spec`` into the pods of the replicated job ``node``."""
    node = registry.TRAINJOB.default_container  # the trainer's replicated job and its container
    return {
        "manager": naming.RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": node, "template": {"spec": {"template": {"spec": pod_spec}}}}]
                }
            }
        },
    }
