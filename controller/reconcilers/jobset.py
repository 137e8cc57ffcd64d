"""JobSet and Indexed Job semantics over plain pods, for TrainJobs.

Upstream runs a TrainJob through two more controllers (JobSet, then the
Kubernetes Job controller). kubetrain creates the pods itself and keeps their
contract: the same hostnames, subdomain, labels and annotations, and the same
outcomes. This module is the pure part: build a pod, digest the pods of a
TrainJob into child Jobs, and decide what JobSet would decide.

* A child Job ``<tj>-<replicated job>-<i>`` is Indexed: it completes when every
  completion index has a Succeeded pod, and fails when its failures (failed
  pods plus in-place container restarts) pass its ``backoffLimit`` (default 6).
  Failures are counted once per pod (``restarts``) and kept in the TrainJob's
  status, so a failed pod that is garbage-collected takes nothing back. A
  failed pod of an index is replaced by a new pod while the Job has not failed;
  the replacement's name derives from the Job's failure count, which never goes
  back, so it can never equal the name of a pod that still exists.
* Success: every Job of every replicated job completes, or the runtime's
  ``successPolicy`` (``All``/``Any`` of the target replicated jobs).
* Failure: a failed Job fails the TrainJob (``FailedJobs``), unless
  ``failurePolicy`` restarts it: every pod is deleted and recreated under the
  next ``jobset.sigs.k8s.io/restart-attempt``, at most ``maxRestarts`` times
  (then ``ReachedMaxRestarts``). Rules pick the action by replicated job and
  Job failure reason.
* ``dependsOn``: a replicated job's pods are created once the jobs it depends on
  are Ready (every Job has its pods ready or done) or Complete.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming
from kubetrain.controller.reconcilers import restarts
from kubetrain.controller.reconcilers.observe import NO_EXIT_CODE, exit_code, restart_count
from kubetrain.controller.state import Obj, PodPlugin
from kubetrain.controller.trainer.policies.common import completion_index_env
from kubetrain.controller.trainer.state import NODE, PodSet, TrainJobInfo

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"


# -- pods -----------------------------------------------------------------------------------------
def pod_name(
    info: TrainJobInfo, pod_set: PodSet, job_index: int, pod_index: int, *, attempt: int, retry: int
) -> str:
    """``<job>-<index>-<5 chars>``, like the Job controller's generateName, but deterministic.

    The suffix is derived from the TrainJob's uid, the restart attempt and the retry of this index,
    so a reconcile that runs twice on a stale cache can never create the same pod twice.
    """
    prefix = f"{naming.trainjob_job_name(info.name, pod_set.name, job_index)}-{pod_index}-"[:58]
    seed = f"{info.uid}/{attempt}/{pod_set.name}/{job_index}/{pod_index}/{retry}".encode()
    number = int.from_bytes(hashlib.sha256(seed).digest()[:8], "big")
    suffix = ""
    for _ in range(5):
        number, digit = divmod(number, len(SUFFIX_ALPHABET))
        suffix += SUFFIX_ALPHABET[digit]
    return prefix + suffix


def pod_labels(
    info: TrainJobInfo, pod_set: PodSet, job_index: int, pod_index: int, attempt: int
) -> dict[str, str]:
    """The labels JobSet and the Job controller put on a pod (JobSet's keys are also annotations)."""
    job_name = naming.trainjob_job_name(info.name, pod_set.name, job_index)
    global_index = sum(s.replicas for s in info.pod_sets[: info.pod_sets.index(pod_set)]) + job_index
    return {
        naming.JOBSET_NAME: info.name,
        naming.JOBSET_UID: info.uid,
        naming.JOBSET_REPLICATED_JOB: pod_set.name,
        naming.JOBSET_REPLICATED_JOB_REPLICAS: str(pod_set.replicas),
        naming.JOBSET_GLOBAL_REPLICAS: str(sum(s.replicas for s in info.pod_sets)),
        naming.JOBSET_JOB_INDEX: str(job_index),
        naming.JOBSET_JOB_GLOBAL_INDEX: str(global_index),
        naming.JOBSET_JOB_KEY: hashlib.sha1(f"{info.namespace}/{job_name}".encode()).hexdigest(),
        naming.JOBSET_RESTART_ATTEMPT: str(attempt),
        naming.JOBSET_GROUP_NAME: "default",
        naming.JOBSET_GROUP_REPLICAS: str(sum(s.replicas for s in info.pod_sets)),
        naming.JOBSET_JOB_GROUP_INDEX: str(global_index),
        naming.JOB_NAME: job_name,
        naming.JOB_NAME_LEGACY: job_name,
        naming.JOB_CONTROLLER_UID: info.uid,
        naming.JOB_CONTROLLER_UID_LEGACY: info.uid,
        naming.JOB_COMPLETION_INDEX: str(pod_index),
    }


def build_pod(
    info: TrainJobInfo,
    pod_set: PodSet,
    job_index: int,
    pod_index: int,
    *,
    attempt: int,
    retry: int,
    plugins: Sequence[PodPlugin],
) -> Obj:
    """Pod ``pod_index`` of child Job ``job_index`` of ``pod_set``."""
    template = copy.deepcopy(pod_set.template)
    metadata = template.get("metadata") or {}
    labels = pod_labels(info, pod_set, job_index, pod_index, attempt)
    jobset_keys = {k: v for k, v in labels.items() if k.startswith("jobset.sigs.k8s.io/")}
    spec: Obj = template.get("spec") or {}
    spec.setdefault("restartPolicy", pod_set.restart_policy)
    if (info.jobset.get("spec", {}).get("network") or {}).get("enableDNSHostnames", True) is not False:
        spec["hostname"] = naming.trainjob_hostname(info.name, pod_set.name, job_index, pod_index)
        spec["subdomain"] = info.subdomain
    index_env = completion_index_env(naming.ENV_JOB_COMPLETION_INDEX)
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if not any(e.get("name") == naming.ENV_JOB_COMPLETION_INDEX for e in container.get("env") or []):
            container.setdefault("env", []).append(dict(index_env))
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(info, pod_set, job_index, pod_index, attempt=attempt, retry=retry),
            "namespace": info.namespace,
            "labels": {**(metadata.get("labels") or {}), **labels},
            "annotations": {
                **(metadata.get("annotations") or {}),
                **jobset_keys,
                naming.JOB_COMPLETION_INDEX: str(pod_index),
            },
            "ownerReferences": [info.owner_reference()],
        },
        "spec": spec,
    }
    if metadata.get("finalizers"):
        pod["metadata"]["finalizers"] = list(metadata["finalizers"])
    for plugin in plugins:
        plugin.decorate_pod(info, pod_set.name, pod_index, pod)
    return pod


def build_service(info: TrainJobInfo) -> Obj:
    """The headless Service that gives every pod ``<hostname>.<subdomain>``; it declares no ports."""
    network = info.jobset.get("spec", {}).get("network") or {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": info.subdomain,
            "namespace": info.namespace,
            "labels": {naming.JOBSET_NAME: info.name},
            "ownerReferences": [info.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {naming.JOBSET_NAME: info.name},
            "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True) is not False,
        },
    }


# -- observation ----------------------------------------------------------------------------------
def _is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


@dataclass
class ChildJob:
    """One emulated Indexed Job and its pods of the current restart attempt."""

    pod_set: PodSet
    index: int
    live: dict[int, Obj] = field(default_factory=dict)
    terminating: dict[int, Obj] = field(default_factory=dict)  # pods going away, by index
    succeeded: set[int] = field(default_factory=set)
    failed_pods: dict[int, list[Obj]] = field(default_factory=dict)
    restarts: int = 0  # in-place container restarts of the live pods
    failures: int = 0  # failed pods and container restarts so far, each counted once

    @property
    def name(self) -> str:
        return f"{self.pod_set.name}-{self.index}"

    @property
    def complete(self) -> bool:
        return len(self.succeeded) >= self.pod_set.count

    @property
    def failed(self) -> bool:
        return not self.complete and self.failures > self.pod_set.backoff_limit

    @property
    def active(self) -> int:
        return sum(
            1 for p in self.live.values() if p.get("status", {}).get("phase") in (None, "Pending", "Running")
        )

    @property
    def ready(self) -> bool:
        """Every index's pod is ready or done (JobSet's ``Ready`` for ``dependsOn``)."""
        ready = sum(1 for i, p in self.live.items() if i not in self.succeeded and _is_ready(p))
        return ready + len(self.succeeded) >= self.pod_set.count

    def missing(self) -> list[int]:
        """Indexes that need a new pod: none running, none succeeded, none still going away."""
        return [
            i
            for i in range(self.pod_set.count)
            if i not in self.live and i not in self.succeeded and i not in self.terminating
        ]

    def failure_detail(self) -> str:
        """What the last failure was: a failed pod's exit code, or a restarted container's last one."""
        pods = [p for ps in self.failed_pods.values() for p in ps]
        if pods:
            last = pods[-1]
            code = exit_code(last, NODE)
            how = (
                f"exited with code {code}"
                if code != NO_EXIT_CODE
                else f"failed ({last.get('status', {}).get('reason') or 'no exit code'})"
            )
            return f"pod {last['metadata']['name']} {how}"
        for pod in self.live.values():
            for status in pod.get("status", {}).get("containerStatuses") or []:
                terminated = (status.get("lastState") or {}).get("terminated")
                if status.get("restartCount") and terminated:
                    return (
                        f"container {status['name']} of pod {pod['metadata']['name']} restarted "
                        f"{status['restartCount']} time(s), last exited with code {terminated.get('exitCode')}"
                    )
        return f"containers restarted {self.restarts} time(s)"


@dataclass
class Observation:
    jobs: list[ChildJob]
    stale: list[Obj]  # pods of an earlier restart attempt, or outside the current shape
    terminating_stale: int
    counted: dict[str, int] = field(default_factory=dict)  # the per-pod bookkeeping to write back

    @property
    def job_failures(self) -> dict[str, int]:
        """Each child Job's failures, for the status (only Jobs that failed at all)."""
        return {j.name: j.failures for j in self.jobs if j.failures}

    def by_set(self, name: str) -> list[ChildJob]:
        return [j for j in self.jobs if j.pod_set.name == name]


def observe(
    info: TrainJobInfo,
    pods: list[Obj],
    attempt: int,
    *,
    job_failures: Mapping[str, int] | None = None,
    counted: Mapping[str, int] | None = None,
) -> Observation:
    """Digest the pods of restart attempt ``attempt`` into child Jobs.

    ``job_failures`` and ``counted`` are the status's bookkeeping (``jobFailures``,
    ``countedPodRestarts``); ``counted=None`` means a status from before it existed, whose current
    failures are taken as counted.
    """
    jobs = {(s.name, i): ChildJob(s, i) for s in info.pod_sets for i in range(s.replicas)}
    stale: list[Obj] = []
    terminating_stale = 0
    pod_failures: dict[str, int] = {}
    job_of: dict[str, ChildJob] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        labels = pod["metadata"].get("labels") or {}
        key = (labels.get(naming.JOBSET_REPLICATED_JOB), _int(labels.get(naming.JOBSET_JOB_INDEX)))
        index = _int(labels.get(naming.JOB_COMPLETION_INDEX))
        job = jobs.get(key)  # type: ignore[arg-type]
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        current = labels.get(naming.JOBSET_RESTART_ATTEMPT) == str(attempt)
        if job is None or index is None or index >= job.pod_set.count or not current:
            if deleting:
                terminating_stale += 1
            else:
                stale.append(pod)
            continue
        if deleting:
            job.terminating[index] = pod
            continue
        phase = pod.get("status", {}).get("phase")
        uid = pod["metadata"]["uid"]
        pod_failures[uid] = restart_count(pod) + (1 if phase == "Failed" else 0)
        job_of[uid] = job
        if phase == "Failed":
            job.failed_pods.setdefault(index, []).append(pod)
            continue
        job.restarts += restart_count(pod)
        if phase == "Succeeded":
            job.succeeded.add(index)
        job.live[index] = pod
    tally = restarts.tally(counted, pod_failures)
    before = job_failures or {}
    for job in jobs.values():
        job.failures = before.get(job.name, 0)
    for uid, new in (tally.counted if counted is None else tally.new).items():
        job_of[uid].failures += new
    return Observation(list(jobs.values()), stale, terminating_stale, tally.counted)


def is_rank0(pod: Obj, pod_set: PodSet) -> bool:
    """Whether ``pod`` is the first pod of the first child Job of ``pod_set`` (of any restart attempt)."""
    labels = pod["metadata"].get("labels") or {}
    return (
        labels.get(naming.JOBSET_REPLICATED_JOB) == pod_set.name
        and labels.get(naming.JOBSET_JOB_INDEX) == "0"
        and labels.get(naming.JOB_COMPLETION_INDEX) == "0"
    )


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


# -- JobSet decisions -----------------------------------------------------------------------------
def succeeded(info: TrainJobInfo, obs: Observation) -> bool:
    policy = info.jobset.get("spec", {}).get("successPolicy") or {}
    targets = policy.get("targetReplicatedJobs") or [s.name for s in info.pod_sets]
    jobs = [j for j in obs.jobs if j.pod_set.name in targets]
    if policy.get("operator") == "Any":
        return any(j.complete for j in jobs)
    return bool(jobs) and all(j.complete for j in jobs)


@dataclass(frozen=True)
class FailureDecision:
    restart: bool
    counts: bool  # whether a restart counts against maxRestarts
    reason: str
    message: str


def on_job_failure(info: TrainJobInfo, failed: ChildJob, restarts_counted: int) -> FailureDecision:
    """What JobSet does about a failed child Job, per the runtime's ``failurePolicy``."""
    policy: dict[str, Any] = info.jobset.get("spec", {}).get("failurePolicy") or {}
    max_restarts = int(policy.get("maxRestarts") or 0)
    detail = (
        f"job {info.name}-{failed.name} failed ({BACKOFF_LIMIT_EXCEEDED}: {failed.failures} failure(s), "
        f"backoffLimit {failed.pod_set.backoff_limit}): {failed.failure_detail()}"
    )
    action, rule_name = None, None
    for rule in policy.get("rules") or []:
        targets = rule.get("targetReplicatedJobs") or []
        reasons = rule.get("onJobFailureReasons") or []
        if (not targets or failed.pod_set.name in targets) and (
            not reasons or BACKOFF_LIMIT_EXCEEDED in reasons
        ):
            action, rule_name = rule.get("action"), rule.get("name")
            break
    if action == "FailJobSet":
        return FailureDecision(
            False,
            False,
            "FailJobSetFailurePolicyAction",
            f"{detail}; failurePolicy rule {rule_name} fails the job",
        )
    ignore = action in ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts")
    if ignore:
        return FailureDecision(True, False, "RestartJobSet", f"{detail}; restarting (rule {rule_name})")
    if restarts_counted < max_restarts:
        return FailureDecision(
            True,
            True,
            "RestartJobSet",
            f"{detail}; restarting all pods ({restarts_counted + 1} of maxRestarts {max_restarts})",
        )
    if max_restarts:
        return FailureDecision(
            False, False, "ReachedMaxRestarts", f"{detail}; reached maxRestarts {max_restarts}"
        )
    return FailureDecision(False, False, "FailedJobs", detail)


def depends_on_met(info: TrainJobInfo, pod_set: PodSet, obs: Observation) -> bool:
    for dependency in pod_set.depends_on:
        jobs = obs.by_set(str(dependency.get("name")))
        if dependency.get("status") == "Complete":
            if not jobs or not all(j.complete for j in jobs):
                return False
        elif not jobs or not all(j.complete or j.failed or j.ready for j in jobs):
            return False
    return True


def jobs_status(info: TrainJobInfo, obs: Observation, *, suspended: bool = False) -> list[Obj]:
    """``status.jobsStatus``: per replicated job, how many child Jobs are ready, active, done."""
    result = []
    for pod_set in info.pod_sets:
        jobs = obs.by_set(pod_set.name)
        running = [j for j in jobs if not j.complete and not j.failed]
        result.append(
            {
                "name": pod_set.name,
                "ready": 0 if suspended else sum(1 for j in running if j.active and j.ready),
                "succeeded": sum(1 for j in jobs if j.complete),
                "failed": sum(1 for j in jobs if j.failed),
                "active": 0 if suspended else sum(1 for j in running if j.active),
                "suspended": len(running) if suspended else 0,
            }
        )
    return result
