"""Write ``bad_inputs.yaml``: malformed manifests of every kind, generated from a few families of mistakes.

Each family (a missing required field, a wrong type, a number out of range, a bad name, conflicting
settings, a pod template the Pod API refuses, ...) is applied to every kind it fits, over one valid base
manifest per kind, so a new kind or a new rule grows the corpus by a line here. The YAML file is the
data the test reads; run ``python -m tests.faults.corpus.generate`` after changing this module, and
review the diff like code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from kubetrain.api import kinds
from tests.faults.corpus import CORPUS, entries

Obj = dict[str, Any]

IMAGE = "example.com/train:1"
HANG = {"sim.kubetrain.dev/outcome": "hang"}  # a pod that starts never ends, so nothing succeeds early
MAX_ID = 45  # leaves room for the longest child-name suffix of every base


# -- JSON Patch operations --------------------------------------------------------------------------
class Op(dict[str, Any]):
    """One JSON Patch operation; written on one line of the YAML."""


def replace(path: str, value: Any) -> Op:
    return Op(op="replace", path=path, value=value)


def add(path: str, value: Any) -> Op:
    return Op(op="add", path=path, value=value)


def remove(path: str) -> Op:
    return Op(op="remove", path=path)


def entry(
    id: str,
    kind: str,
    why: str,
    patch: list[Op],
    *,
    rejected: str | None = None,
    failed: str | None = None,
    waiting: str | None = None,
    needs: str | None = None,
) -> Obj:
    expect = {k: v for k, v in (("rejected", rejected), ("failed", failed), ("waiting", waiting)) if v}
    assert len(expect) == 1, id
    assert len(id) <= MAX_ID, f"{id} is longer than {MAX_ID} characters"
    out: Obj = {"id": id, "kind": kind, "why": why, "patch": patch, "expect": expect}
    if needs:
        out["needs"] = needs
    return out


# -- the kinds ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class V1Kind:
    kind: str
    prefix: str  # the kind's short name, which starts every id
    field: str  # the replica map
    container: str  # the container the framework looks for
    base_types: dict[str, int]  # the base manifest's replica types and counts
    restart_policy: str
    keys_any_case: bool  # upstream takes its replica keys in any case (TFJob)

    @property
    def path(self) -> str:
        return f"spec.{self.field}"

    def pointer(self, *parts: str) -> str:
        return "/" + "/".join(("spec", self.field, *parts))


BASE_TYPES = {  # the base manifest of each kind: its replica types and counts
    "PyTorchJob": {"Master": 1, "Worker": 2},
    "TFJob": {"Chief": 1, "Worker": 2},
    "XGBoostJob": {"Master": 1, "Worker": 2},
    "PaddleJob": {"Worker": 2},
    "JAXJob": {"Worker": 2},
}
V1_KINDS = tuple(
    V1Kind(
        k.kind,
        k.short_names[0],
        k.replica_field,
        k.default_container,
        BASE_TYPES[k.kind],
        k.default_restart_policy,
        k.replica_keys_any_case,
    )
    for k in kinds.V1_JOBS
)


def container(name: str, **extra: Any) -> Obj:
    return {"name": name, "image": IMAGE, **extra}


def pod_template(*container_names: str) -> Obj:
    return {
        "metadata": {"annotations": dict(HANG)},
        "spec": {"containers": [container(n) for n in container_names]},
    }


def replica(kind: V1Kind, count: int) -> Obj:
    return {"replicas": count, "restartPolicy": kind.restart_policy, "template": pod_template(kind.container)}


def v1_base(kind: V1Kind) -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind.kind,
        "metadata": {"name": "base"},
        "spec": {kind.field: {t: replica(kind, n) for t, n in kind.base_types.items()}},
    }


RUNTIME_GROUP = "trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def replicated_job(name: str, *containers: str, ancestor: str | None = "trainer") -> Obj:
    """A replicated job whose pods run ``containers`` (default: the trainer's ``node``)."""
    job: Obj = {"name": name, "template": {"spec": {"template": pod_template(*(containers or ("node",)))}}}
    if ancestor:
        job["template"]["metadata"] = {"labels": {ANCESTOR: ancestor}}
    return job


def runtime(kind: str, name: str, *jobs: Obj, policy: Obj | None = None, **jobset: Any) -> Obj:
    spec: Obj = {"template": {"spec": {"replicatedJobs": list(jobs), **jobset}}}
    if policy is not None:
        spec["mlPolicy"] = policy
    return {"apiVersion": RUNTIME_GROUP, "kind": kind, "metadata": {"name": name}, "spec": spec}


TORCH = {"numNodes": 1, "torch": {}}


def trainjob_base() -> Obj:
    return {
        "apiVersion": RUNTIME_GROUP,
        "kind": "TrainJob",
        "metadata": {"name": "base"},
        "spec": {
            "runtimeRef": {"name": "corpus-torch", "kind": "TrainingRuntime"},
            "trainer": {"numNodes": 2},
        },
    }


LONG_JOB = "j" * 45  # a replicated job name that leaves a TrainJob little room
SUPPORT = [
    runtime("TrainingRuntime", "corpus-torch", replicated_job("node"), policy=TORCH),
    runtime("TrainingRuntime", "corpus-no-trainer", replicated_job("worker", "worker", ancestor=None)),
    runtime("TrainingRuntime", "corpus-long-names", replicated_job(LONG_JOB), policy=TORCH),
    runtime(
        "TrainingRuntime",
        "corpus-no-dns-hostnames",
        replicated_job(LONG_JOB + "jjjjj"),
        policy=TORCH,
        network={"enableDNSHostnames": False},
    ),
    runtime("TrainingRuntime", "corpus-empty", policy=TORCH),
    runtime("TrainingRuntime", "corpus-bad-pod", replicated_job("node", "node", "Side_Car"), policy=TORCH),
]  # fmt: skip


def bases() -> dict[str, Obj]:
    found = {k.kind: v1_base(k) for k in V1_KINDS}
    found["TrainJob"] = trainjob_base()
    for kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        found[kind] = runtime(kind, "base", replicated_job("node"), policy=TORCH)
    return found


# -- families of mistakes: every v1 kind -------------------------------------------------------------
# A family is a table: (id suffix, why the input is bad, the patch, the text the message must contain).
Case = tuple[str, str, list[Op], str]


def rejected_cases(k: V1Kind, cases: list[Case]) -> Iterator[Obj]:
    for name, why, patch, message in cases:
        yield entry(f"{k.prefix}-{name}", k.kind, why, patch, rejected=message)


def v1_structure(k: V1Kind) -> Iterator[Obj]:
    """Required fields missing, or of the wrong type."""
    first = next(iter(k.base_types))
    c0 = ("template", "spec", "containers", "0")
    lower_case = {
        first.lower(): replica(k, 1),
        **{t: replica(k, n) for t, n in k.base_types.items() if t != first},
    }
    yield from rejected_cases(k, [
        ("spec-missing", "no spec at all", [remove("/spec")], "spec"),
        ("spec-is-a-string", "spec of the wrong type", [replace("/spec", "train")], "spec"),
        ("replica-specs-missing", f"no {k.field}", [remove(k.pointer())], k.path),
        ("replica-specs-is-a-list", f"{k.field} as a list", [replace(k.pointer(), [])], k.path),
        ("replica-specs-empty", "no replica type at all: nothing would run", [replace(k.pointer(), {})], k.path),
        *([] if k.keys_any_case else [("replica-type-lower-case", "a replica type spelled in lower case (upstream's webhook refuses it too)", [replace(k.pointer(), lower_case)], f"{k.path} keys must be one of")]),
        *([("replica-type-in-two-cases", "one replica type spelled in two cases", [add(k.pointer(first.lower()), replica(k, 1))], "names a replica type twice")] if k.keys_any_case else []),
        ("replica-type-unknown", "a replica type this kind does not have", [replace(k.pointer(), {"Launcher": replica(k, 1)})], f"{k.path} keys must be one of"),
        ("replica-is-a-number", "a replica spec that is a number", [replace(k.pointer(first), 3)], f"{k.path}.{first}"),
        ("template-missing", "a replica without a pod template", [remove(k.pointer(first, "template"))], "template.spec.containers must list at least one container"),
        ("template-spec-missing", "a pod template without a spec", [remove(k.pointer(first, "template", "spec"))], "template.spec.containers must list at least one container"),
        ("containers-empty", "a pod template with no container", [replace(k.pointer(first, *c0[:-1]), [])], "template.spec.containers must list at least one container"),
        ("containers-is-an-object", "containers as an object instead of a list", [replace(k.pointer(first, *c0[:-1]), {"name": k.container})], f"{k.path}.{first}.template.spec.containers"),
        ("image-missing", "a container without an image", [remove(k.pointer(first, *c0, "image"))], "containers[*].image is required"),
        ("image-empty", "a container whose image is empty", [replace(k.pointer(first, *c0, "image"), "")], "containers[*].image is required"),
        ("container-renamed", f"no container named {k.container}: the framework would not know where to put its env", [replace(k.pointer(first, *c0, "name"), "main")], f"must include a container named {k.container}"),
        ("container-name-missing", "a container without a name", [remove(k.pointer(first, *c0, "name"))], f"{k.path}.{first}.template.spec.containers[0].name"),
        ("container-port-is-text", "a container port that is not a number", [add(k.pointer(first, *c0, "ports"), [{"containerPort": "http"}])], f"{k.path}.{first}.template.spec.containers[0].ports[0].containerPort"),
        ("limits-is-a-list", "resources.limits as a list", [add(k.pointer(first, *c0, "resources"), {"limits": ["cpu"]})], f"{k.path}.{first}.template.spec.containers[0].resources.limits"),
        ("pod-label-is-a-number", "a pod label whose value is a number", [add(k.pointer(first, "template", "metadata", "labels"), {"tier": 1})], f"{k.path}.{first}.template.metadata.labels.tier"),
        ("run-policy-is-a-list", "runPolicy as a list", [add("/spec/runPolicy", [])], "spec.runPolicy"),
    ])  # fmt: skip


def v1_numbers(k: V1Kind) -> Iterator[Obj]:
    """Replica counts out of range or of the wrong type, on every replica type of the base."""
    for rtype in k.base_types:
        r, count, at = rtype.lower(), k.pointer(rtype, "replicas"), f"{k.path}.{rtype}.replicas"
        yield from rejected_cases(k, [
            (f"{r}-replicas-negative", "a negative replica count", [replace(count, -1)], at),
            (f"{r}-replicas-text", "a replica count written as a word", [replace(count, "two")], at),
            (f"{r}-replicas-fraction", "a fractional replica count", [replace(count, 1.5)], at),
            (f"{r}-replicas-over-max", "more pods than one replica type may have (10000)", [replace(count, 10001)], at),
            (f"{r}-replicas-huge", "a replica count past int32", [replace(count, 2**40)], at),
            (f"{r}-restart-policy-unknown", "a restartPolicy that does not exist", [replace(k.pointer(rtype, "restartPolicy"), "Sometimes")], f"{k.path}.{rtype}.restartPolicy"),
        ])  # fmt: skip
    first = next(iter(k.base_types))
    policy, at = k.pointer(first, "restartPolicy"), f"{k.path}.{first}.restartPolicy"
    yield from rejected_cases(k, [
        ("restart-policy-lower-case", "restartPolicy spelled in lower case", [replace(policy, k.restart_policy.lower())], at),
        ("restart-policy-is-a-number", "restartPolicy as a number", [replace(policy, 1)], at),
    ])  # fmt: skip


def v1_run_policy(k: V1Kind) -> Iterator[Obj]:
    """runPolicy: cleanup, lifetimes, retries, gang scheduling, ownership."""
    cases: list[tuple[str, str, Obj, str]] = [
        ("clean-pod-policy-unknown", "a cleanPodPolicy that does not exist", {"cleanPodPolicy": "Some"}, "spec.runPolicy.cleanPodPolicy"),
        ("clean-pod-policy-lower-case", "cleanPodPolicy in lower case", {"cleanPodPolicy": "all"}, "spec.runPolicy.cleanPodPolicy"),
        ("ttl-negative", "a negative TTL", {"ttlSecondsAfterFinished": -1}, "spec.runPolicy.ttlSecondsAfterFinished"),
        ("ttl-duration-text", "a TTL written as a duration", {"ttlSecondsAfterFinished": "1h"}, "spec.runPolicy.ttlSecondsAfterFinished"),
        ("deadline-negative", "a negative activeDeadlineSeconds", {"activeDeadlineSeconds": -5}, "spec.runPolicy.activeDeadlineSeconds"),
        ("deadline-fraction", "a fractional activeDeadlineSeconds", {"activeDeadlineSeconds": 0.5}, "spec.runPolicy.activeDeadlineSeconds"),
        ("backoff-negative", "a negative backoffLimit", {"backoffLimit": -1}, "spec.runPolicy.backoffLimit"),
        ("backoff-text", "a backoffLimit written as a string", {"backoffLimit": "3"}, "spec.runPolicy.backoffLimit"),
        ("suspend-text", "suspend as a word", {"suspend": "yes"}, "spec.runPolicy.suspend"),
        ("managed-by-unknown", "a managedBy no controller answers to: the job would never run", {"managedBy": "example.com/other"}, "spec.runPolicy.managedBy"),
        ("min-available-negative", "a negative gang minAvailable", {"schedulingPolicy": {"minAvailable": -1}}, "spec.runPolicy.schedulingPolicy.minAvailable"),
        ("schedule-timeout-negative", "a negative gang scheduleTimeoutSeconds", {"schedulingPolicy": {"scheduleTimeoutSeconds": -1}}, "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"),
        ("queue-is-a-number", "a gang queue that is a number", {"schedulingPolicy": {"queue": 7}}, "spec.runPolicy.schedulingPolicy.queue"),
    ]  # fmt: skip
    for name, why, policy, at in cases:
        yield entry(f"{k.prefix}-{name}", k.kind, why, [add("/spec/runPolicy", policy)], rejected=at)


def v1_names(k: V1Kind) -> Iterator[Obj]:
    """Names the API server takes for other objects, but not for a job whose children carry them."""
    cases = [
        ("name-upper-case", "Bad-Name", "upper case: Services and hostnames are lower case"),
        ("name-underscore", "bad_name", "an underscore is not allowed in a DNS label"),
        ("name-starts-with-digit", "9lives", "a DNS-1035 label starts with a letter"),
        ("name-with-dot", "bad.name", "a dot would split the pod's DNS name"),
        ("name-64-chars", "n" * 64, "longer than any DNS label"),
    ]
    for suffix, name, why in cases:
        yield entry(
            f"{k.prefix}-{suffix}", k.kind, why, [replace("/metadata/name", name)], rejected="metadata.name"
        )
    longest = max(k.base_types, key=len)
    suffix_len = len(longest) + 2 + len(str(k.base_types[longest] - 1))
    yield entry(
        f"{k.prefix}-name-too-long-for-services",
        k.kind,
        "a 63-character name: the CRD's own limit, but <name>-<replica type>-<index> would be longer",
        [replace("/metadata/name", "s" * 63)],
        rejected=f"use a name of at most {63 - suffix_len} characters",
    )
    fits_ten = 63 - len("-worker-9")  # every base has Workers
    yield entry(
        f"{k.prefix}-name-too-long-for-replicas",
        k.kind,
        "a name that fits 10 Workers but not 1000: the index adds digits",
        [replace("/metadata/name", "r" * fits_ten), replace(k.pointer("Worker", "replicas"), 1000)],
        rejected=f"use a name of at most {fits_ten - 2} characters",
    )


def v1_pod_api(k: V1Kind) -> Iterator[Obj]:
    """Pod templates the CRD schema accepts but the Pod API refuses: the job must fail, saying why."""

    def on_every_type(*parts: str, value: Any) -> list[Op]:
        return [add(k.pointer(t, "template", *parts), value) for t in k.base_types]

    main = ("spec", "containers", "0")
    cases: list[Case] = [
        ("pod-container-name-invalid", "a second container whose name is not a DNS label", on_every_type("spec", "containers", "-", value=container("Side_Car")), "spec.containers[1].name"),
        ("pod-container-name-duplicate", "two containers of the same name", on_every_type("spec", "containers", "-", value=container(k.container)), "spec.containers[1].name"),
        ("pod-init-container-duplicate", "an init container named like the main one", on_every_type("spec", "initContainers", value=[container(k.container)]), "spec.initContainers[0].name"),
        ("pod-mount-without-volume", "a volumeMount naming no volume", on_every_type(*main, "volumeMounts", value=[{"name": "data", "mountPath": "/data"}]), "spec.containers[0].volumeMounts[0].name"),
        ("pod-limits-below-requests", "a CPU limit below the request", on_every_type(*main, "resources", value={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}), "spec.containers[0].resources.requests"),
        ("pod-memory-negative", "a negative memory request", on_every_type(*main, "resources", value={"requests": {"memory": "-1Gi"}}), "spec.containers[0].resources.requests[memory]"),
        ("pod-gpu-fraction", "half a GPU: extended resources are whole", on_every_type(*main, "resources", value={"limits": {"nvidia.com/gpu": "0.5"}}), "nvidia.com/gpu"),
        ("pod-port-out-of-range", "a sidecar's containerPort above 65535", on_every_type("spec", "containers", "-", value=container("sidecar", ports=[{"containerPort": 70000}])), "spec.containers[1].ports[0].containerPort"),
        ("pod-port-name-too-long", "a port name over 15 characters", on_every_type(*main, "ports", value=[{"name": "a-very-long-port-name", "containerPort": 8080}]), "spec.containers[0].ports[0].name"),
        ("pod-pull-policy-unknown", "an imagePullPolicy that does not exist", on_every_type(*main, "imagePullPolicy", value="Sometimes"), "spec.containers[0].imagePullPolicy"),
        ("pod-probe-without-handler", "a readiness probe with no handler", on_every_type(*main, "readinessProbe", value={"periodSeconds": 5}), "spec.containers[0].readinessProbe"),
        ("pod-volume-duplicate", "two volumes of the same name", on_every_type("spec", "volumes", value=[{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]), "spec.volumes[1].name"),
        ("pod-label-key-invalid", "a pod label key with a space", on_every_type("metadata", "labels", value={"bad key": "x"}), "metadata.labels"),
        ("pod-run-as-user-negative", "runAsUser below 0", on_every_type("spec", "securityContext", value={"runAsUser": -1}), "spec.securityContext.runAsUser"),
        ("pod-dns-policy-unknown", "a dnsPolicy that does not exist", on_every_type("spec", "dnsPolicy", value="Sometimes"), "spec.dnsPolicy"),
        ("pod-node-selector-invalid", "a nodeSelector value with a space", on_every_type("spec", "nodeSelector", value={"zone": "bad value"}), "spec.nodeSelector"),
        ("pod-toleration-invalid", "an Exists toleration with a value", on_every_type("spec", "tolerations", value=[{"key": "a", "operator": "Exists", "value": "b"}]), "spec.tolerations[0].operator"),
    ]  # fmt: skip
    for name, why, patch, message in cases:
        yield entry(f"{k.prefix}-{name}", k.kind, why, patch, failed=message)
    # Refused with another status than 422: a body the Pod API cannot decode (400) fails the job; a pod
    # that admission forbids until something exists (403) waits for it, with a condition that says so.
    yield entry(
        f"{k.prefix}-pod-quantity-invalid",
        k.kind,
        "a CPU limit that is not a quantity: the Pod API cannot decode the pod (400)",
        on_every_type(*main, "resources", value={"limits": {"cpu": "lots"}}),
        failed="quantities must match",
    )
    forbidden = [
        ("pod-priority-class-missing", "a priorityClassName that does not exist (admission answers 403)", "priorityClassName", "no-such-priority"),
        ("pod-service-account-missing", "a serviceAccountName that does not exist (admission answers 403)", "serviceAccountName", "no-such-account"),
    ]  # fmt: skip
    for name, why, field, missing in forbidden:
        patch = on_every_type("spec", field, value=missing)
        yield entry(f"{k.prefix}-{name}", k.kind, why, patch, waiting=missing)
    # A named port of the framework's container also becomes a port of the replica's Service, which the
    # Service API refuses first.
    yield entry(
        f"{k.prefix}-service-port-out-of-range",
        k.kind,
        f"a named port above 65535 on the {k.container} container: its Service is refused",
        on_every_type(*main, "ports", value=[{"name": "metrics", "containerPort": 70000}]),
        failed="spec.ports[0].port",
    )


def v1_success(k: V1Kind) -> Iterator[Obj]:
    """Specs under which the controller's success rule could never run a pod, or never be met."""

    def types(**counts: int) -> list[Op]:
        return [replace(k.pointer(), {t: replica(k, n) for t, n in counts.items()})]

    elastic = "/spec/elasticPolicy"
    nproc = "spec.nprocPerNode must be auto, cpu, gpu or a positive integer"
    cases: dict[str, list[Case]] = {
        "PyTorchJob": [
            ("master-replicas-zero", "Master decides success: 0 would succeed at once", types(Master=0, Worker=2), "spec.pytorchReplicaSpecs[Master].replicas must be 1"),
            ("master-replicas-two", "a PyTorchJob has one Master", types(Master=2, Worker=2), "spec.pytorchReplicaSpecs[Master].replicas must be 1"),
            ("worker-only-replicas-zero", "Workers decide success without a Master: 0 would succeed at once", types(Worker=0), "spec.pytorchReplicaSpecs[Worker].replicas must be at least 1"),
            ("master-replicas-unset", "the Master's count must be explicit", [remove(k.pointer("Master", "replicas"))], "spec.pytorchReplicaSpecs[Master].replicas must be 1"),
            ("elastic-min-over-max", "elastic minReplicas above maxReplicas", [add(elastic, {"minReplicas": 4, "maxReplicas": 2})], "spec.elasticPolicy.minReplicas must not exceed"),
            ("elastic-min-zero", "elastic minReplicas 0", [add(elastic, {"minReplicas": 0, "maxReplicas": 2})], "spec.elasticPolicy.minReplicas"),
            ("elastic-max-over-limit", "elastic maxReplicas past the replica limit", [add(elastic, {"minReplicas": 1, "maxReplicas": 10001})], "spec.elasticPolicy.maxReplicas"),
            ("elastic-backend-unknown", "a rendezvous backend torchrun does not have", [add(elastic, {"rdzvBackend": "zookeeper"})], "spec.elasticPolicy.rdzvBackend"),
            ("elastic-port-zero", "rendezvous port 0", [add(elastic, {"rdzvPort": 0})], "spec.elasticPolicy.rdzvPort"),
            ("elastic-port-over-65535", "rendezvous port above 65535", [add(elastic, {"rdzvPort": 70000})], "spec.elasticPolicy.rdzvPort"),
            ("elastic-nproc-zero", "elastic nProcPerNode 0", [add(elastic, {"nProcPerNode": 0})], "spec.elasticPolicy.nProcPerNode"),
            ("elastic-max-restarts-negative", "elastic maxRestarts below 0", [add(elastic, {"maxRestarts": -1})], "spec.elasticPolicy.maxRestarts"),
            ("elastic-and-nproc-both", "nProcPerNode set twice, in elasticPolicy and at spec level", [add(elastic, {"nProcPerNode": 2}), add("/spec/nprocPerNode", "2")], "spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode"),
            ("elastic-without-worker", "elastic training needs Workers", [*types(Master=1), add(elastic, {"minReplicas": 1, "maxReplicas": 2})], "spec.pytorchReplicaSpecs[Worker] must be configured"),
            ("elastic-is-a-list", "elasticPolicy as a list", [add(elastic, [])], "spec.elasticPolicy"),
            ("nproc-zero", "nprocPerNode 0", [add("/spec/nprocPerNode", "0")], nproc),
            ("nproc-negative", "nprocPerNode -1", [add("/spec/nprocPerNode", "-1")], nproc),
            ("nproc-word", "nprocPerNode as a word torchrun does not know", [add("/spec/nprocPerNode", "all")], nproc),
            ("nproc-upper-case", "nprocPerNode GPU in upper case", [add("/spec/nprocPerNode", "GPU")], nproc),
            ("nproc-leading-zero", "nprocPerNode with a leading zero", [add("/spec/nprocPerNode", "08")], nproc),
            ("nproc-is-a-number", "nprocPerNode as a number (it is a string field)", [add("/spec/nprocPerNode", 4)], "spec.nprocPerNode"),
        ],
        "TFJob": [
            ("chief-replicas-zero", "the Chief decides success: 0 would succeed at once", types(Chief=0, Worker=2), "spec.tfReplicaSpecs[Chief/Master].replicas must be 1"),
            ("master-replicas-zero", "the Master decides success: 0 would succeed at once", types(Master=0, Worker=2), "spec.tfReplicaSpecs[Chief/Master].replicas must be 1"),
            ("chief-replicas-two", "there is one chief", types(Chief=2, Worker=2), "spec.tfReplicaSpecs[Chief/Master].replicas must be 1"),
            ("chief-and-master", "Chief and Master both: which one decides?", types(Chief=1, Master=1), "must not have more than 1 Chief or Master role"),
            ("worker-only-replicas-zero", "Workers decide success without a chief: 0 would succeed at once", types(Worker=0), "spec.tfReplicaSpecs[Worker].replicas must be at least 1"),
            ("ps-and-worker-zero", "parameter servers with 0 Workers: nothing would train", types(PS=1, Worker=0), "spec.tfReplicaSpecs[Worker].replicas must be at least 1"),
            ("ps-only", "only parameter servers: nothing decides success, the job would never end", types(PS=2), "spec.tfReplicaSpecs must have a Chief, Master or Worker"),
            ("evaluator-only", "only an Evaluator: the job would never end", types(Evaluator=1), "spec.tfReplicaSpecs must have a Chief, Master or Worker"),
            ("success-policy-unknown", "a successPolicy that does not exist", [add("/spec/successPolicy", "AnyWorker")], "spec.successPolicy"),
            ("dynamic-worker-text", "enableDynamicWorker as a word", [add("/spec/enableDynamicWorker", "yes")], "spec.enableDynamicWorker"),
        ],
        "XGBoostJob": [
            ("no-master", "the Master is the tracker and decides success", types(Worker=2), "spec.xgbReplicaSpecs[Master] must be present"),
            ("master-replicas-zero", "the Master decides success: 0 would succeed at once", types(Master=0, Worker=2), "spec.xgbReplicaSpecs[Master].replicas must be 1"),
            ("master-replicas-two", "one tracker only", types(Master=2, Worker=2), "spec.xgbReplicaSpecs[Master].replicas must be 1"),
        ],
        "PaddleJob": [
            ("master-replicas-zero", "the Master decides success: 0 would succeed at once", types(Master=0, Worker=2), "spec.paddleReplicaSpecs[Master].replicas must be at least 1"),
            ("worker-only-replicas-zero", "Workers decide success without a Master: 0 would succeed at once", types(Worker=0), "spec.paddleReplicaSpecs[Worker].replicas must be at least 1"),
            ("elastic-min-zero", "elastic minReplicas 0", [add(elastic, {"minReplicas": 0})], "spec.elasticPolicy.minReplicas"),
            ("elastic-max-over-limit", "elastic maxReplicas past the replica limit", [add(elastic, {"maxReplicas": 10001})], "spec.elasticPolicy.maxReplicas"),
            ("elastic-restarts-negative", "elastic maxRestarts below 0", [add(elastic, {"maxRestarts": -1})], "spec.elasticPolicy.maxRestarts"),
        ],
        "JAXJob": [
            ("worker-replicas-zero", "Workers decide success: 0 would succeed at once", types(Worker=0), "spec.jaxReplicaSpecs[Worker].replicas must be at least 1"),
        ],
    }  # fmt: skip
    yield from rejected_cases(k, cases[k.kind])


# -- TrainJob -------------------------------------------------------------------------------------
def trainjob() -> Iterator[Obj]:
    kind = "TrainJob"
    trainer, ref = "/spec/trainer", "/spec/runtimeRef"
    rejected: list[tuple[str, str, list[Op], str]] = [
        ("tj-spec-missing", "no spec", [remove("/spec")], "spec"),
        ("tj-runtime-ref-missing", "no runtimeRef", [remove(ref)], "spec.runtimeRef"),
        ("tj-runtime-name-missing", "a runtimeRef without a name", [remove(ref + "/name")], "spec.runtimeRef.name"),
        ("tj-runtime-name-empty", "an empty runtime name", [replace(ref + "/name", "")], "spec.runtimeRef.name"),
        ("tj-runtime-name-too-long", "a runtime name over 253 characters", [replace(ref + "/name", "r" * 254)], "spec.runtimeRef.name"),
        ("tj-runtime-kind-unknown", "a runtime kind that is not a runtime", [replace(ref + "/kind", "Deployment")], "spec.runtimeRef.kind"),
        ("tj-runtime-kind-lower-case", "a runtime kind in lower case", [replace(ref + "/kind", "trainingruntime")], "spec.runtimeRef.kind"),
        ("tj-runtime-api-group-too-long", "an apiGroup over 253 characters", [add(ref + "/apiGroup", "g" * 254)], "spec.runtimeRef.apiGroup"),
        ("tj-runtime-ref-is-a-string", "runtimeRef as a bare name", [replace(ref, "corpus-torch")], "spec.runtimeRef"),
        ("tj-num-nodes-negative", "a negative node count", [replace(trainer + "/numNodes", -1)], "spec.trainer.numNodes"),
        ("tj-num-nodes-over-max", "more nodes than a TrainJob may have (10000)", [replace(trainer + "/numNodes", 10001)], "spec.trainer.numNodes"),
        ("tj-num-nodes-text", "a node count written as a word", [replace(trainer + "/numNodes", "two")], "spec.trainer.numNodes"),
        ("tj-num-nodes-fraction", "a fractional node count", [replace(trainer + "/numNodes", 1.5)], "spec.trainer.numNodes"),
        ("tj-nproc-zero", "numProcPerNode 0", [add(trainer + "/numProcPerNode", 0)], "spec.trainer.numProcPerNode"),
        ("tj-nproc-auto", "numProcPerNode 'auto' (an int since Trainer v2.2; leave it unset for auto)", [add(trainer + "/numProcPerNode", "auto")], "spec.trainer.numProcPerNode"),
        ("tj-image-too-long", "an image reference over 500 characters", [add(trainer + "/image", "example.com/" + "i" * 500)], "spec.trainer.image"),
        ("tj-command-is-a-string", "command as one string instead of a list", [add(trainer + "/command", "python train.py")], "spec.trainer.command"),
        ("tj-command-too-many", "a command of 129 items", [add(trainer + "/command", ["x"] * 129)], "spec.trainer.command"),
        ("tj-args-is-a-map", "args as a map", [add(trainer + "/args", {"epochs": 3})], "spec.trainer.args"),
        ("tj-env-reserved-pet", "setting PET_NNODES, which the controller owns", [add(trainer + "/env", [{"name": "PET_NNODES", "value": "4"}])], "spec.trainer.env must not set reserved names"),
        ("tj-env-reserved-dmlc", "setting DMLC_TASK_ID, which the controller owns", [add(trainer + "/env", [{"name": "DMLC_TASK_ID", "value": "0"}])], "spec.trainer.env must not set reserved names"),
        ("tj-env-without-name", "an env entry without a name", [add(trainer + "/env", [{"value": "1"}])], "spec.trainer.env[0].name"),
        ("tj-env-too-many", "129 env entries", [add(trainer + "/env", [{"name": f"V{i}", "value": "1"} for i in range(129)])], "spec.trainer.env"),
        ("tj-resources-limits-is-a-list", "resourcesPerNode.limits as a list", [add(trainer + "/resourcesPerNode", {"limits": ["cpu"]})], "spec.trainer.resourcesPerNode.limits"),
        ("tj-storage-uri-no-scheme", "a dataset URI without a scheme", [add("/spec/initializer", {"dataset": {"storageUri": "datasets/mnist"}})], "storageUri must be a URI with a scheme"),
        ("tj-storage-uri-too-long", "a model URI over 2048 characters", [add("/spec/initializer", {"model": {"storageUri": "hf://" + "m" * 2048}})], "spec.initializer.model.storageUri"),
        ("tj-deadline-zero", "activeDeadlineSeconds 0", [add("/spec/activeDeadlineSeconds", 0)], "spec.activeDeadlineSeconds"),
        ("tj-deadline-negative", "a negative activeDeadlineSeconds", [add("/spec/activeDeadlineSeconds", -60)], "spec.activeDeadlineSeconds"),
        ("tj-deadline-text", "a deadline written as a duration", [add("/spec/activeDeadlineSeconds", "1h")], "spec.activeDeadlineSeconds"),
        ("tj-managed-by-unknown", "a managedBy no controller answers to", [add("/spec/managedBy", "example.com/other")], "spec.managedBy must be one of"),
        ("tj-managed-by-too-long", "a managedBy over 253 characters", [add("/spec/managedBy", "example.com/" + "m" * 250)], "spec.managedBy"),
        ("tj-suspend-text", "suspend as a word", [add("/spec/suspend", "yes")], "spec.suspend"),
        ("tj-patch-manager-no-domain", "a runtime patch manager without a domain", [add("/spec/runtimePatches", [{"manager": "me"}])], "spec.runtimePatches[*].manager must be a domain-prefixed path"),
        ("tj-patch-manager-missing", "a runtime patch without a manager", [add("/spec/runtimePatches", [{"trainingRuntimeSpec": {}}])], "spec.runtimePatches[0].manager"),
        ("tj-patches-too-many", "17 runtime patches", [add("/spec/runtimePatches", [{"manager": f"example.com/m{i}"} for i in range(17)])], "spec.runtimePatches"),
        ("tj-patch-grace-negative", "a negative terminationGracePeriodSeconds in a patch", [add("/spec/runtimePatches", [{"manager": "example.com/m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": -1}}}}}]}}}}])], "terminationGracePeriodSeconds"),
        ("tj-patch-container-no-name", "a container patch without a name", [add("/spec/runtimePatches", [{"manager": "example.com/m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"env": []}]}}}}}]}}}}])], "containers[0].name"),
        ("tj-overrides-no-targets", "a podTemplateOverride without targetJobs", [add("/spec/podTemplateOverrides", [{"spec": {"nodeSelector": {"a": "b"}}}])], "spec.podTemplateOverrides[0].targetJobs"),
        ("tj-name-upper-case", "an upper-case name", [replace("/metadata/name", "Bad-Name")], "metadata.name"),
        ("tj-name-starts-with-digit", "a name starting with a digit", [replace("/metadata/name", "9lives")], "metadata.name"),
        ("tj-name-58-chars", "58 characters: upstream admits it, but no runtime can give its pods hostnames", [replace("/metadata/name", "t" * 58)], "metadata.name must be at most 57 characters"),
        ("tj-name-64-chars", "longer than any DNS label", [replace("/metadata/name", "t" * 64)], "metadata.name"),
    ]  # fmt: skip
    for id, why, patch, message in rejected:
        yield entry(id, kind, why, patch, rejected=message)

    def runtime_ref(name: str, runtime_kind: str = "TrainingRuntime") -> Op:
        return replace(ref, {"name": name, "kind": runtime_kind})

    accepted: list[tuple[str, str, list[Op], str, str, str | None]] = [
        ("tj-runtime-not-found", "a runtime that does not exist (yet): the TrainJob waits, saying so", [runtime_ref("corpus-no-such-runtime")], "waiting", "corpus-no-such-runtime", None),
        ("tj-cluster-runtime-not-found", "a cluster runtime that does not exist (yet)", [runtime_ref("corpus-no-such-runtime", "ClusterTrainingRuntime")], "waiting", "corpus-no-such-runtime", None),
        ("tj-runtime-without-trainer", "spec.trainer set, but the runtime has no trainer step", [runtime_ref("corpus-no-trainer")], "failed", "has no trainer step", None),
        ("tj-initializer-without-step", "a dataset initializer the runtime has no step for", [add("/spec/initializer", {"dataset": {"storageUri": "hf://org/data"}})], "failed", "spec.initializer.dataset is set", None),
        ("tj-patch-unknown-job", "a runtime patch for a replicated job the runtime lacks", [add("/spec/runtimePatches", [{"manager": "example.com/m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "launcher"}]}}}}])], "failed", "patches replicated job 'launcher'", None),
        ("tj-override-unknown-job", "a v2.1 pod override for a job the runtime lacks", [add("/spec/podTemplateOverrides", [{"targetJobs": [{"name": "launcher"}], "spec": {"nodeSelector": {"a": "b"}}}])], "failed", "spec.podTemplateOverrides[0].targetJobs names 'launcher'", None),
        ("tj-runtime-without-jobs", "a runtime with no replicated jobs: nothing to run", [runtime_ref("corpus-empty")], "failed", "has no spec.template.spec.replicatedJobs", None),
        ("tj-name-too-long-for-runtime", "57 characters pass admission, but <name>-node-0-1 is 66", [replace("/metadata/name", "h" * 57)], "failed", "use a name of at most 54 characters", None),
        ("tj-name-too-long-for-job-names", "a short name, but the runtime's replicated job name is 45 characters", [runtime_ref("corpus-long-names"), replace("/metadata/name", "tj-long-job-names")], "failed", "use a name of at most 13 characters", None),
        ("tj-name-too-long-no-hostnames", "without DNS hostnames the child Job name (a label value) still must fit", [runtime_ref("corpus-no-dns-hostnames"), replace("/metadata/name", "tj-no-hostnames")], "failed", "child Job name", None),
        ("tj-runtime-pod-invalid", "the runtime's pod template has a container name the Pod API refuses", [runtime_ref("corpus-bad-pod")], "failed", "spec.containers[1].name", None),
        ("tj-image-empty", "spec.trainer.image set to an empty string", [add(trainer + "/image", "")], "failed", "spec.containers[0].image", None),
        ("tj-limits-below-requests", "resourcesPerNode with a CPU limit below the request", [add(trainer + "/resourcesPerNode", {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})], "failed", "spec.containers[0].resources.requests", None),
        ("tj-env-name-invalid", "an env name with '='", [add(trainer + "/env", [{"name": "A=B", "value": "1"}])], "failed", "spec.containers[0].env", None),
        ("tj-quantity-invalid", "a GPU count that is not a quantity: the ML policy cannot count GPUs", [add(trainer + "/resourcesPerNode", {"limits": {"nvidia.com/gpu": "lots"}})], "failed", "spec.trainer.resourcesPerNode", None),
        ("tj-patch-mount-without-volume", "a runtime patch mounting a volume nobody defines", [add("/spec/runtimePatches", [{"manager": "example.com/m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "volumeMounts": [{"name": "ghost", "mountPath": "/g"}]}]}}}}}]}}}}])], "failed", "volumeMounts[0].name", None),
    ]  # fmt: skip
    for id, why, patch, outcome, message, needs in accepted:
        yield entry(id, kind, why, patch, needs=needs, **{outcome: message})


# -- TrainingRuntime and ClusterTrainingRuntime --------------------------------------------------------
def runtimes(kind: str) -> Iterator[Obj]:
    p = "tr" if kind == "TrainingRuntime" else "ctr"
    jobs = "/spec/template/spec/replicatedJobs"
    job0 = jobs + "/0"
    job_spec = job0 + "/template/spec"
    at = "spec.template.spec.replicatedJobs"

    def second(**fields: Any) -> Op:
        job = replicated_job("worker", "worker", ancestor=None)
        job.update(fields)
        return add(jobs + "/-", job)

    cases: list[tuple[str, str, list[Op], str]] = [
        ("spec-missing", "no spec", [remove("/spec")], "spec"),
        ("template-missing", "no JobSet template", [remove("/spec/template")], "spec.template"),
        ("template-spec-missing", "a template without a spec", [remove("/spec/template/spec")], "spec.template.spec"),
        ("jobs-is-a-map", "replicatedJobs as a map", [replace(jobs, {"node": {}})], at),
        ("jobs-too-many", "101 replicated jobs", [replace(jobs, [replicated_job(f"j{i}", ancestor=None) for i in range(101)])], at),
        ("job-name-missing", "a replicated job without a name", [remove(job0 + "/name")], f"{at}[0].name"),
        ("job-name-empty", "an empty replicated job name", [replace(job0 + "/name", "")], f"{at}[0].name"),
        ("job-name-upper-case", "an upper-case replicated job name: it becomes part of hostnames", [replace(job0 + "/name", "Node")], f"{at}[0].name"),
        ("job-name-underscore", "an underscore in a replicated job name", [replace(job0 + "/name", "node_1")], f"{at}[0].name"),
        ("job-name-64-chars", "a replicated job name over 63 characters", [replace(job0 + "/name", "n" * 64)], f"{at}[0].name"),
        ("job-names-duplicate", "two replicated jobs of one name", [second(name="node")], f"{at}[*].name must be unique"),
        ("job-template-missing", "a replicated job without a template", [remove(job0 + "/template")], f"{at}[0].template"),
        ("job-spec-missing", "a job template without a spec", [remove(job_spec)], f"{at}[0].template.spec"),
        ("job-replicas-zero", "0 replicas of a replicated job", [add(job0 + "/replicas", 0)], f"{at}[0].replicas"),
        ("job-replicas-negative", "negative replicas", [add(job0 + "/replicas", -1)], f"{at}[0].replicas"),
        ("job-replicas-over-max", "more than 10000 child Jobs", [add(job0 + "/replicas", 10001)], f"{at}[0].replicas"),
        ("parallelism-negative", "negative parallelism", [add(job_spec + "/parallelism", -1)], f"{at}[0].template.spec.parallelism"),
        ("parallelism-over-max", "more than 10000 pods per Job", [add(job_spec + "/parallelism", 10001)], f"{at}[0].template.spec.parallelism"),
        ("pods-over-max", "200 Jobs of 100 pods: 20000 pods in one replicated job", [add(job0 + "/replicas", 200), add(job_spec + "/parallelism", 100)], "must be at most 10000 pods per replicated job"),
        ("completions-negative", "negative completions", [add(job_spec + "/completions", -1)], f"{at}[0].template.spec.completions"),
        ("completion-mode-unknown", "a completionMode that does not exist", [add(job_spec + "/completionMode", "Sometimes")], f"{at}[0].template.spec.completionMode"),
        ("job-backoff-negative", "a negative Job backoffLimit", [add(job_spec + "/backoffLimit", -1)], f"{at}[0].template.spec.backoffLimit"),
        ("job-deadline-zero", "a Job activeDeadlineSeconds of 0", [add(job_spec + "/activeDeadlineSeconds", 0)], f"{at}[0].template.spec.activeDeadlineSeconds"),
        ("pod-containers-missing", "a pod template without containers", [remove(job_spec + "/template/spec/containers")], f"{at}[0].template.spec.template.spec.containers"),
        ("pod-containers-is-a-map", "containers as a map", [replace(job_spec + "/template/spec/containers", {"node": {}})], f"{at}[0].template.spec.template.spec.containers"),
        ("first-job-depends-on", "the first replicated job cannot depend on another", [add(job0 + "/dependsOn", [{"name": "node", "status": "Complete"}])], "replicatedJobs[0].dependsOn must be empty"),
        ("depends-on-unknown-job", "waiting on a replicated job that does not exist: it would never start", [second(dependsOn=[{"name": "ghost", "status": "Complete"}])], f"{at}[*].dependsOn must name another replicated job"),
        ("depends-on-itself", "a replicated job waiting on itself", [second(dependsOn=[{"name": "worker", "status": "Ready"}])], f"{at}[*].dependsOn must name another replicated job"),
        ("depends-on-status-unknown", "a dependsOn status that does not exist", [second(dependsOn=[{"name": "node", "status": "Running"}])], f"{at}[1].dependsOn[0].status"),
        ("depends-on-too-many", "six dependencies", [second(dependsOn=[{"name": "node", "status": "Ready"}] * 6)], f"{at}[1].dependsOn"),
        ("success-operator-unknown", "a successPolicy operator that does not exist", [add("/spec/template/spec/successPolicy", {"operator": "Most"})], "spec.template.spec.successPolicy.operator"),
        ("success-target-unknown", "success decided by a replicated job that does not exist: it could never succeed", [add("/spec/template/spec/successPolicy", {"operator": "All", "targetReplicatedJobs": ["ghost"]})], "spec.template.spec.successPolicy.targetReplicatedJobs must name"),
        ("failure-max-restarts-negative", "negative maxRestarts", [add("/spec/template/spec/failurePolicy", {"maxRestarts": -1})], "spec.template.spec.failurePolicy.maxRestarts"),
        ("failure-action-unknown", "a failure rule action that does not exist", [add("/spec/template/spec/failurePolicy", {"rules": [{"name": "r", "action": "Explode"}]})], "spec.template.spec.failurePolicy.rules[0].action"),
        ("restart-strategy-unknown", "a restartStrategy that does not exist", [add("/spec/template/spec/failurePolicy", {"restartStrategy": "Sometimes"})], "spec.template.spec.failurePolicy.restartStrategy"),
        ("ttl-negative", "a negative ttlSecondsAfterFinished", [add("/spec/template/spec/ttlSecondsAfterFinished", -1)], "spec.template.spec.ttlSecondsAfterFinished"),
        ("two-ml-policies", "torch and mpi at once", [replace("/spec/mlPolicy", {"torch": {}, "mpi": {}})], "mlPolicy must set at most one of"),
        ("num-nodes-zero", "mlPolicy.numNodes 0", [replace("/spec/mlPolicy/numNodes", 0)], "spec.mlPolicy.numNodes"),
        ("num-nodes-over-max", "mlPolicy.numNodes past 10000", [replace("/spec/mlPolicy/numNodes", 10001)], "spec.mlPolicy.numNodes"),
        ("num-nodes-text", "mlPolicy.numNodes as a word", [replace("/spec/mlPolicy/numNodes", "two")], "spec.mlPolicy.numNodes"),
        ("mpi-nproc-zero", "MPI slots per node 0", [replace("/spec/mlPolicy", {"mpi": {"numProcPerNode": 0}})], "spec.mlPolicy.mpi.numProcPerNode"),
        ("mpi-implementation-unknown", "an MPI implementation the runtime does not support", [replace("/spec/mlPolicy", {"mpi": {"mpiImplementation": "MPICH"}})], "spec.mlPolicy.mpi.mpiImplementation"),
        ("mpi-ssh-path-too-long", "an SSH mount path over 4096 characters", [replace("/spec/mlPolicy", {"mpi": {"sshAuthMountPath": "/" + "s" * 4096}})], "spec.mlPolicy.mpi.sshAuthMountPath"),
        ("two-gang-schedulers", "coscheduling and volcano at once", [add("/spec/podGroupPolicy", {"coscheduling": {}, "volcano": {}})], "podGroupPolicy must set only one of"),
        ("gang-timeout-negative", "a negative coscheduling timeout", [add("/spec/podGroupPolicy", {"coscheduling": {"scheduleTimeoutSeconds": -1}})], "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds"),
        ("claims-without-templates", "a volumeClaimPolicy without templates", [add("/spec/template/spec/volumeClaimPolicies", [{"retentionPolicy": {"whenDeleted": "Delete"}}])], "spec.template.spec.volumeClaimPolicies[0].templates"),
        ("claims-retention-unknown", "a retention policy that does not exist", [add("/spec/template/spec/volumeClaimPolicies", [{"templates": [], "retentionPolicy": {"whenDeleted": "Keep"}}])], "spec.template.spec.volumeClaimPolicies[0].retentionPolicy.whenDeleted"),
        ("name-upper-case", "an upper-case name", [replace("/metadata/name", "Bad-Name")], "metadata.name"),
        ("job-ttl", "a Job-level TTL: JobSet would recreate the deleted Job", [add(job_spec + "/ttlSecondsAfterFinished", 60)], "template.spec.ttlSecondsAfterFinished is not supported"),
        ("job-success-policy", "a Job-level successPolicy kubetrain does not carry out", [add(job_spec + "/successPolicy", {"rules": []})], "template.spec.successPolicy is not supported"),
        ("job-non-indexed", "a NonIndexed Job: no completion index, no rank", [add(job_spec + "/completionMode", "NonIndexed")], "completionMode must be Indexed"),
        ("pod-failure-policy-on-failure", "a podFailurePolicy on pods that restart in place", [add(job_spec + "/podFailurePolicy", {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]})], "podFailurePolicy needs the pod template's restartPolicy to be Never"),
        ("jobset-managed-by", "a JobSet managedBy: kubetrain runs no JobSet", [add("/spec/template/spec/managedBy", "example.com/x")], "spec.template.spec.managedBy is not supported"),
        ("jobset-suspended", "a runtime that would suspend every TrainJob", [add("/spec/template/spec/suspend", True)], "spec.template.spec.suspend cannot be true"),
        ("trainer-replicas-two", "two replicas of the trainer's replicated job", [add(job0 + "/replicas", 2)], "replicas must be 1 for a replicated job labelled"),
        ("flux-policy", "the Flux framework, which kubetrain does not run", [replace("/spec/mlPolicy", {"flux": {}})], "spec.mlPolicy.flux is not supported"),
    ]  # fmt: skip
    for name, why, patch, message in cases:
        yield entry(f"{p}-{name}", kind, why, patch, rejected=message)


def all_entries() -> list[Obj]:
    found: list[Obj] = []
    for k in V1_KINDS:
        for family in (v1_structure, v1_numbers, v1_run_policy, v1_names, v1_success, v1_pod_api):
            found.extend(family(k))
    found.extend(trainjob())
    found.extend(runtimes("TrainingRuntime"))
    found.extend(runtimes("ClusterTrainingRuntime"))
    ids = [e["id"] for e in found]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, duplicates
    return found


def render() -> str:
    data: Obj = {"bases": bases(), "support": SUPPORT, "entries": all_entries()}
    entries(data)  # builds every manifest: a patch that does not apply to its base fails here
    header = (
        "# The bad-input corpus (tests/faults/test_bad_inputs.py reads it).\n"
        "# Generated by tests/faults/corpus/generate.py; to add entries, add them there and run\n"
        "# `python -m tests.faults.corpus.generate`.\n"
    )
    return header + yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, width=120)


class _PlainDumper(yaml.SafeDumper):
    """No anchors and aliases, so every entry reads on its own; a patch operation on one line."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_PlainDumper.add_representer(
    Op, lambda dumper, op: dumper.represent_mapping("tag:yaml.org,2002:map", op, flow_style=True)
)


def main() -> None:
    CORPUS.write_text(render())
    print(f"wrote {CORPUS} ({len(all_entries())} entries)")


if __name__ == "__main__":
    main()
