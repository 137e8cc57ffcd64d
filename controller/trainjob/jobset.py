"""JobSet semantics over plain pods, for TrainJobs.

Upstream runs a TrainJob through two more controllers (JobSet, then the
Kubernetes Job controller). kubetrain creates the pods itself and keeps their
contract: the same hostnames, subdomain, labels and annotations, and the same
outcomes. This module is the pure part: build a pod, digest the pods of a
TrainJob into child Jobs (whose own rules, the Job controller's, are
``trainjob.indexedjob``), and decide what JobSet would decide.

* A child Job ``<tj>-<replicated job>-<i>`` is Indexed. Its failures are counted
  once per pod (``restarts``) and kept in the TrainJob's status, so a failed pod
  that is garbage-collected takes nothing back; a failed pod of an index is
  replaced by a new pod while the Job has not failed, and the replacement's name
  derives from counts that never go back, so it can never equal the name of a pod
  that still exists.
* Success: every Job of every replicated job completes, or the runtime's
  ``successPolicy`` (``All``/``Any`` of the target replicated jobs).
* Failure: a failed Job fails the TrainJob (``FailedJobs``) when the runtime has
  no ``failurePolicy``; with one, the first rule matching a failed Job (by
  replicated job, Job failure reason and message) picks the action, else the
  whole TrainJob restarts: every pod is deleted and recreated under the next
  ``jobset.sigs.k8s.io/restart-attempt``, at most ``maxRestarts`` times (then
  ``ReachedMaxRestarts``).
* ``dependsOn``: a replicated job's pods are created once the jobs it depends on
  are Ready (every Job has its pods ready or done) or Complete.
* ``coordinator`` and ``groupName`` label every pod as JobSet labels them.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming
from kubetrain.api.objects import Obj, section
from kubetrain.client.kinds import disruption_condition
from kubetrain.controller.core import restarts
from kubetrain.controller.core.observe import restart_count
from kubetrain.controller.core.skeleton import gpu_seconds, parse_time, rfc3339
from kubetrain.controller.state import PodPlugin
from kubetrain.controller.trainjob.indexedjob import (
    FAIL_INDEX,
    FAIL_JOB,
    IGNORE,
    ChildJob,
    Limits,
    earliest,
    index_counts,
    judge,
    judge_failed_pod,
)
from kubetrain.trainjob.policies.common import completion_index_env
from kubetrain.trainjob.state import PodSet, TrainJobInfo

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet


# -- pods -----------------------------------------------------------------------------------------
def pod_name(info: TrainJobInfo, child: ChildJob, pod_index: int, *, attempt: int) -> str:
    """``<job>-<index>-<5 chars>``, like the Job controller's generateName, but deterministic.

    The suffix is derived from the TrainJob's uid, the restart attempt, the child Job's counted failures
    and the index's ignored failures (a ``podFailurePolicy`` Ignore rule's, which do not count), so a
    reconcile that runs twice on a stale cache can never create the same pod twice, and a replacement
    never takes the name of its predecessor.
    """
    pod_set, job_index = child.pod_set, child.index
    _, ignored = child.retry(pod_index)
    prefix = f"{naming.trainjob_job_name(info.name, pod_set.name, job_index)}-{pod_index}-"[:58]
    seed = f"{info.uid}/{attempt}/{pod_set.name}/{job_index}/{pod_index}/{child.failures}"
    if ignored:
        seed += f"/ignored-{ignored}"
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
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
    in_group = [s for s in info.pod_sets if s.group == pod_set.group]
    group_index = sum(s.replicas for s in in_group[: in_group.index(pod_set)]) + job_index
    labels = {
        naming.JOBSET_NAME: info.name,
        naming.JOBSET_UID: info.uid,
        naming.JOBSET_REPLICATED_JOB: pod_set.name,
        naming.JOBSET_REPLICATED_JOB_REPLICAS: str(pod_set.replicas),
        naming.JOBSET_GLOBAL_REPLICAS: str(sum(s.replicas for s in info.pod_sets)),
        naming.JOBSET_JOB_INDEX: str(job_index),
        naming.JOBSET_JOB_GLOBAL_INDEX: str(global_index),
        naming.JOBSET_JOB_KEY: hashlib.sha1(f"{info.namespace}/{job_name}".encode()).hexdigest(),
        naming.JOBSET_RESTART_ATTEMPT: str(attempt),
        naming.JOBSET_GROUP_NAME: pod_set.group,
        naming.JOBSET_GROUP_REPLICAS: str(sum(s.replicas for s in in_group)),
        naming.JOBSET_JOB_GROUP_INDEX: str(group_index),
        naming.JOB_NAME: job_name,
        naming.JOB_NAME_LEGACY: job_name,
        naming.JOB_CONTROLLER_UID: info.uid,
        naming.JOB_CONTROLLER_UID_LEGACY: info.uid,
        naming.JOB_COMPLETION_INDEX: str(pod_index),
    }
    if info.coordinator is not None:
        labels[naming.JOBSET_COORDINATOR] = info.coordinator
    return labels


def build_pod(
    info: TrainJobInfo, child: ChildJob, pod_index: int, *, attempt: int, plugins: Sequence[PodPlugin]
) -> Obj:
    """Pod ``pod_index`` of ``child``; it carries the failures and ignored failures of its index so far
    as the Job controller's annotations."""
    pod_set, job_index = child.pod_set, child.index
    template = copy.deepcopy(pod_set.template)
    metadata = template.get("metadata") or {}
    labels = pod_labels(info, pod_set, job_index, pod_index, attempt)
    jobset_keys = {k: v for k, v in labels.items() if k.startswith("jobset.sigs.k8s.io/")}
    spec = section(template, "spec")
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
            "name": pod_name(info, child, pod_index, attempt=attempt),
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
    limits = Limits.of(pod_set)
    if limits.per_index is not None or limits.pod_failure_policy is not None:
        failures, ignored = child.retry(pod_index)
        pod["metadata"]["annotations"].update(
            {
                naming.JOB_INDEX_FAILURE_COUNT: str(failures),
                naming.JOB_INDEX_IGNORED_FAILURE_COUNT: str(ignored),
            }
        )
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
@dataclass
class Observation:
    jobs: list[ChildJob]
    stale: list[Obj]  # pods of an earlier restart attempt, or outside the current shape
    terminating_stale: int
    counted: dict[str, int] = field(default_factory=dict)  # the per-pod bookkeeping to write back
    disrupted: list[Obj] = field(default_factory=list)  # pods of this attempt the cluster is stopping

    @property
    def job_failures(self) -> dict[str, int]:
        """Each child Job's failures, for the status (only Jobs that failed at all)."""
        return {j.name: j.failures for j in self.jobs if j.failures}

    @property
    def failed_indexes(self) -> dict[str, list[int]]:
        """Each child Job's failed indexes (``backoffLimitPerIndex``), for the status."""
        return {j.name: sorted(j.failed_indexes) for j in self.jobs if j.failed_indexes}

    @property
    def start_times(self) -> dict[str, str]:
        """When each child Job started (its first pod of the attempt), for the status."""
        return {j.name: rfc3339(j.started) for j in self.jobs if j.started is not None}

    def by_set(self, name: str) -> list[ChildJob]:
        return [j for j in self.jobs if j.pod_set.name == name]

    def next_deadline(self, now: dt.datetime) -> float | None:
        """Seconds until the first child Job's ``activeDeadlineSeconds`` passes."""
        left = [s for j in self.jobs if not j.failed and (s := j.deadline_left(now)) is not None]
        return min(left) if left else None


def _place(jobs: Mapping[tuple[str, int], ChildJob], pod: Obj, attempt: int) -> tuple[ChildJob, int] | None:
    """The child Job and completion index of a pod of restart attempt ``attempt``; None for a pod of an
    earlier attempt, or of a Job or an index the TrainJob no longer has."""
    labels = pod["metadata"].get("labels") or {}
    if labels.get(naming.JOBSET_RESTART_ATTEMPT) != str(attempt):
        return None
    key = (labels.get(naming.JOBSET_REPLICATED_JOB), _int(labels.get(naming.JOBSET_JOB_INDEX)))
    job = jobs.get(key)  # type: ignore[arg-type]
    index = _int(labels.get(naming.JOB_COMPLETION_INDEX))
    if job is None or index is None or index >= job.pod_set.count:
        return None
    return job, index


def _file(job: ChildJob, index: int, pod: Obj) -> int:
    """File a pod of the attempt (not being deleted) under its index, as the Job controller would judge
    it; the failures it adds to its restarts (1 for a Failed pod the pod failure policy does not ignore)."""
    counts = index_counts(pod)
    phase = pod.get("status", {}).get("phase")
    if phase == "Failed":
        job.failed_pods.setdefault(index, []).append(pod)
        verdict = judge_failed_pod(job.limits.pod_failure_policy, pod)
        if verdict.action == IGNORE:
            _note(job, index, (counts[0], counts[1] + 1))
            return 0
        _note(job, index, (counts[0] + 1, counts[1]))
        if verdict.action == FAIL_INDEX:
            job.failed_indexes.add(index)
        elif verdict.action == FAIL_JOB and job.fail_job is None:
            job.fail_job = verdict.message
        return 1
    _note(job, index, counts)
    job.restarts += restart_count(pod)
    if phase == "Succeeded":
        job.succeeded.add(index)
    job.live[index] = pod
    return 0


def observe(
    info: TrainJobInfo,
    pods: list[Obj],
    attempt: int,
    *,
    job_failures: Mapping[str, int] | None = None,
    counted: Mapping[str, int] | None = None,
    failed_indexes: Mapping[str, list[int]] | None = None,
    started: Mapping[str, str] | None = None,
    now: dt.datetime | None = None,
) -> Observation:
    """Digest the pods of restart attempt ``attempt`` into child Jobs, and judge each as the Job controller
    would (its deadline only when ``now`` is given).

    ``job_failures``, ``counted``, ``failed_indexes`` and ``started`` are the status's bookkeeping
    (``jobFailures``, ``countedPodRestarts``, ``failedIndexes``, ``jobStartTimes``); ``counted=None``
    means a status from before it existed, whose current failures are taken as counted.
    """
    jobs = {(s.name, i): ChildJob(s, i) for s in info.pod_sets for i in range(s.replicas)}
    stale: list[Obj] = []
    terminating_stale = 0
    pod_failures: dict[str, int] = {}
    job_of: dict[str, ChildJob] = {}
    created: dict[str, list[str | None]] = {}
    disrupted: list[Obj] = []
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        place = _place(jobs, pod, attempt)
        if place is None:
            if deleting:
                terminating_stale += 1
            else:
                stale.append(pod)
            continue
        job, index = place
        created.setdefault(job.name, []).append(pod["metadata"].get("creationTimestamp"))
        if disruption_condition(pod) is not None and not _rules_disruptions(job.limits.pod_failure_policy):
            disrupted.append(pod)  # the attempt restarts uncounted: its failure is not the pod's
        elif deleting:
            job.terminating[index] = pod
            _note(job, index, index_counts(pod))
        else:
            uid = pod["metadata"]["uid"]
            job_of[uid] = job
            pod_failures[uid] = restart_count(pod) + _file(job, index, pod)
    tally = restarts.tally(counted, pod_failures)
    before = job_failures or {}
    for job in jobs.values():
        job.failures = before.get(job.name, 0)
        job.failed_indexes |= set((failed_indexes or {}).get(job.name) or [])
        job.started = earliest([(started or {}).get(job.name), *created.get(job.name, [])])
    for uid, new in (tally.counted if counted is None else tally.new).items():
        job_of[uid].failures += new
    for job in jobs.values():
        judge(job, now)
    return Observation(list(jobs.values()), stale, terminating_stale, tally.counted, disrupted)


def disrupted_gpu_seconds(pods: Sequence[Obj], obs: Observation, now: dt.datetime) -> int:
    """GPU-seconds of the attempt's runs a disruption cut short: every pod of the attempt still running
    (or disrupted) when the first disruption came, from its start to then."""
    stale = {p["metadata"]["uid"] for p in obs.stale}
    disrupted = {p["metadata"]["uid"] for p in obs.disrupted}
    stopped_at = min(
        parse_time((disruption_condition(p) or {}).get("lastTransitionTime")) or now for p in obs.disrupted
    )
    cut = [
        p
        for p in pods
        if p["metadata"]["uid"] in disrupted
        or (
            p["metadata"]["uid"] not in stale
            and (p.get("status") or {}).get("phase") in ("Running", "Pending")
        )
    ]
    return gpu_seconds(cut, stopped_at)


def _rules_disruptions(policy: Obj | None) -> bool:
    """Whether a ``podFailurePolicy`` says itself what a disrupted pod does (a rule on ``DisruptionTarget``):
    then the Job controller's rules apply, as upstream, instead of kubetrain's uncounted restart."""
    return any(
        pattern.get("type") == "DisruptionTarget"
        for rule in (policy or {}).get("rules") or []
        for pattern in rule.get("onPodConditions") or []
    )


def _note(job: ChildJob, index: int, counts: tuple[int, int]) -> None:
    """Keep the highest failure counts seen on a pod of ``index`` (each pod carries its predecessors')."""
    failures, ignored = job.index_failures.get(index, (0, 0))
    job.index_failures[index] = (max(failures, counts[0]), max(ignored, counts[1]))


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


def on_job_failure(info: TrainJobInfo, failed: Sequence[ChildJob], restarts_counted: int) -> FailureDecision:
    """What JobSet does about its failed child Jobs, per the runtime's ``failurePolicy``.

    Without a policy the TrainJob fails (``FailedJobs``). With one, the first rule that matches a failed
    Job picks the action; no rule matching means ``RestartJobSet``, up to ``maxRestarts`` (default 0)."""
    policy: dict[str, Any] | None = info.jobset.get("spec", {}).get("failurePolicy")
    if policy is None:
        return FailureDecision(False, False, "FailedJobs", _describe(info, failed[0]))
    max_restarts = int(policy.get("maxRestarts") or 0)
    rule, job = _first_matching_rule(policy, failed)
    detail = _describe(info, job)
    action = rule.get("action") if rule else "RestartJobSet"
    rule_name = rule.get("name") if rule else None
    if action == "FailJobSet":
        return FailureDecision(
            False,
            False,
            "FailJobSetFailurePolicyAction",
            f"{detail}; failurePolicy rule {rule_name} fails the job",
        )
    if action in ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts"):
        return FailureDecision(True, False, "RestartJobSet", f"{detail}; restarting (rule {rule_name})")
    if restarts_counted < max_restarts:
        return FailureDecision(
            True,
            True,
            "RestartJobSet",
            f"{detail}; restarting all pods ({restarts_counted + 1} of maxRestarts {max_restarts})",
        )
    return FailureDecision(
        False, False, "ReachedMaxRestarts", f"{detail}; reached maxRestarts {max_restarts}"
    )


def _describe(info: TrainJobInfo, job: ChildJob) -> str:
    assert job.failure is not None
    return f"job {info.name}-{job.name} failed {job.failure.describe()}"


def _first_matching_rule(policy: Obj, failed: Sequence[ChildJob]) -> tuple[Obj | None, ChildJob]:
    """The first rule, in order, that a failed Job matches, and that Job (the first failed one if none)."""
    for rule in policy.get("rules") or []:
        for job in failed:
            if _applies(rule, job):
                return rule, job
    return None, failed[0]


def _applies(rule: Obj, job: ChildJob) -> bool:
    assert job.failure is not None
    targets = rule.get("targetReplicatedJobs") or []
    reasons = rule.get("onJobFailureReasons") or []
    patterns = rule.get("onJobFailureMessagePatterns") or []
    return (
        (not targets or job.pod_set.name in targets)
        and (not reasons or job.failure.reason in reasons)
        and (not patterns or any(_matches(p, job.failure.message) for p in patterns))
    )


def _matches(pattern: str, message: str) -> bool:
    """A Go regexp's MatchString: anywhere in the message; an invalid pattern matches nothing (as JobSet)."""
    try:
        return re.search(pattern, message) is not None
    except re.error:
        return False


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


def settle_jobs_status(jobs_status: list[Obj], *, complete: bool) -> None:
    """A finished TrainJob has no active or ready child Job: those still running when it finished count
    as succeeded when it completed and as failed when it failed (their pods are stopped, as the Job
    controller counts the pods it stops when a Job fails)."""
    into = "succeeded" if complete else "failed"
    for entry in jobs_status:
        entry[into] = int(entry.get(into) or 0) + int(entry.get("active") or 0)
        entry["active"] = entry["ready"] = 0
