"""What one reconcile of a Kubeflow v1 job decides, as a pure function: ``decide``.

``decide(job, observed, now, setup)`` reads the job as the cache holds it, its
pods and services, and the time, and returns a ``Decision``: the status to
write, the Events and counters to record, the children to create and delete,
rank 0's report to copy, the pod group and autoscaler the job needs, and when
to look again. It does no I/O, so every rule of the lifecycle is unit-tested
pass by pass (``tests/unit/controller/test_v1_decisions.py``);
``v1.reconciler`` carries a Decision out, in the order docs/reliability.md
documents.

The rules, in the order they apply (docs/job-lifecycle.md says them for users):

1. a job seen for the first time gets ``Created`` (and a warning when only some
   replica types request GPUs);
2. a finished job: clean up (``cleanup_targets``), and delete it once its TTL
   has passed (else look again when it will have);
3. a suspended job: delete its pods, services, pod group and autoscaler; a
   resumed one restarts its clock;
4. otherwise digest the pods (``observe``), count restarts once per pod
   (``restarts``), and decide, in this order: the job succeeded (its deciding
   replicas did); a newer attempt fenced it off its checkpoint directory; the
   backoff limit or the deadline is exceeded; a replica failed for good (a failed
   job names the replica that failed first, ``controller.diagnosis``). A job
   that finishes is cleaned up only after its terminal status is written;
5. a running job: a pod stopped by a disruption is counted in ``disruptions``
   (not as a restart) and its peers are stopped with it; a job that reported no
   progress for its stall timeout has its pods restarted (a counted restart), and
   fails as ``Stalled`` once it stalled too often; ``Restarting`` while failed pods are recreated, else
   ``Running`` once its deciding replicas run (containers restarted in place
   are counted, and leave the job Running); create the missing pods and services, delete the
   pods to restart (after the status that counts them), and look again at the
   deadline.

A child the API server refuses for good is a decision too: ``on_rejection``.
"""

from __future__ import annotations

import copy
import datetime as dt
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubetrain import naming
from kubetrain.api.objects import Obj
from kubetrain.controller import diagnosis
from kubetrain.controller.core import conditions as cond
from kubetrain.controller.core import restarts, stalls
from kubetrain.controller.core.children import build_pod, build_service, replica_of
from kubetrain.controller.core.observe import (
    FENCED,
    NO_EXIT_CODE,
    Observation,
    fenced_failure,
    observe,
    rank0_report,
)
from kubetrain.controller.core.skeleton import gpu_seconds, parse_time, rfc3339, seconds_left
from kubetrain.controller.plugins.gang import GangScheduler
from kubetrain.controller.plugins.gpu import lopsided_gpu_warning
from kubetrain.controller.state import PodPlugin
from kubetrain.controller.v1.frameworks.base import Framework, JobInfo, job_info, replica_labels
from kubetrain.kube.events import NORMAL, WARNING
from kubetrain.kube.patch import merge_patch

CONDITIONS = cond.V1


class Phase(enum.Enum):
    """Where the job is, which decides the order its writes are made in."""

    FINISHED = "finished"  # it had finished before this pass
    SUSPENDED = "suspended"
    FINISHING = "finishing"  # it finishes in this pass
    RUNNING = "running"


@dataclass(frozen=True)
class Event:
    type: str  # NORMAL or WARNING
    reason: str
    message: str


Counter = Literal["created", "restarted", "disrupted", "successful", "failed", "deleted"]


@dataclass(frozen=True)
class Finish:
    """How the job finishes in this pass: recorded after its terminal status is written."""

    succeeded: bool
    reason: str
    message: str

    @property
    def event(self) -> Event:
        return Event(NORMAL if self.succeeded else WARNING, self.reason, self.message)

    @property
    def counter(self) -> Counter:
        return "successful" if self.succeeded else "failed"


@dataclass(frozen=True)
class Setup:
    """What the controller was started with, for one kind."""

    framework: Framework
    plugins: Sequence[PodPlugin] = ()
    gang: GangScheduler | None = None


@dataclass(frozen=True)
class Observed:
    """What the caches hold of the job's children."""

    pods: Sequence[Obj]  # the pods the job controls
    services: Sequence[Obj] = ()
    departed: Sequence[Obj] = ()  # deleted pods that left a report no pass has copied yet


@dataclass
class Decision:
    """Everything one pass decided; ``v1.reconciler`` carries it out."""

    phase: Phase
    info: JobInfo  # the job as decided on: a private copy, defaulted, with the warnings building found
    status: Obj  # the status to write
    now: dt.datetime
    pods: list[Obj]  # the pods it was decided on
    services: list[Obj]
    events: list[Event] = field(default_factory=list)  # recorded at once
    counters: list[tuple[Counter, int]] = field(default_factory=list)  # counted at once
    report: dict[str, Any] | None = None  # rank 0's report, to copy into the job (None: nothing new)
    copies_report: bool = True  # whether this pass copies the report (and so uses up the departed pods)
    finish: Finish | None = None
    create_services: list[Obj] = field(default_factory=list)
    create_pods: list[Obj] = field(default_factory=list)
    delete_pods: list[Obj] = field(default_factory=list)  # to restart, or out of range: after the status
    # Deleted only once every delete above succeeded: the disrupted pods whose peers go with them. Each is
    # why its peers are deleted, so while a peer's delete fails it stays, and the next pass sees it again.
    delete_pods_last: list[Obj] = field(default_factory=list)
    delete_services: list[Obj] = field(default_factory=list)
    cleanup_pods: list[Obj] = field(default_factory=list)  # finished or suspended: what goes
    cleanup_services: list[Obj] = field(default_factory=list)
    pod_group: Obj | None = None  # the pod group the pods need first (gang scheduling)
    delete_pod_group: bool = False
    autoscaler: Obj | None = None  # the HorizontalPodAutoscaler of an elastic job
    delete_autoscaler: bool = False
    delete_job: bool = False  # its TTL has passed
    requeue_after: float | None = None

    @property
    def stamp(self) -> str:
        return rfc3339(self.now)

    def after_creates(self) -> Obj:
        """The status once the pods could be created: a ``ReplicaFailure`` from refused creates is over."""
        status = copy.deepcopy(self.status)
        cond.remove(status, cond.REPLICA_FAILURE)
        return status

    def waiting_for_pod_group(self) -> Obj:
        """The status while pods wait for the pod group (upstream stamps ``lastReconcileTime``)."""
        return {**self.status, "lastReconcileTime": self.stamp}


# What a job's first status write sets besides conditions and counts: its initial values.
FIRST_WRITE = frozenset({"startTime", "countedPodRestarts", "restartCount"})
PROGRESS = frozenset({cond.CREATED, cond.RUNNING})  # conditions whose turning True is only progress


def progress_only(original: Obj, status: Obj) -> bool:
    """Whether ``status`` differs from ``original`` (the status on record) only by a job's progress:
    replica counts, ``Created`` or ``Running`` becoming True, and the initial values a first write
    sets. Everything else (a restart, a failure, an ending, a suspension, a pod that cannot be
    created, a report) is news a user or a later pass acts on."""
    changed = set(merge_patch(original, status))
    first = {name for name in changed & FIRST_WRITE if name not in original}
    if not changed <= {"replicaStatuses", "conditions", *first}:
        return False
    before = {c["type"]: (c.get("status"), c.get("reason")) for c in original.get("conditions") or []}
    after = {c["type"]: (c.get("status"), c.get("reason")) for c in status.get("conditions") or []}
    turned = {ctype for ctype in before.keys() | after.keys() if before.get(ctype) != after.get(ctype)}
    return all(ctype in PROGRESS and after.get(ctype, ("",))[0] == "True" for ctype in turned)


def status_hold(
    original: Obj, status: Obj, pending_since: float | None, now: float, window: float
) -> float | None:
    """Seconds to hold back a status write, or None to write it now.

    A write of progress only (``progress_only``) waits until ``window`` seconds after the first such
    change was held (``pending_since``, on the monotonic clock ``now`` is read from), so a job
    starting (``Created``, its pods pending, then running, ``Running``) or its pods finishing one
    after the other costs one status write, not one each. Any other change is never held back, and
    it carries what was held with it."""
    if status == original or not progress_only(original, status):
        return None
    if pending_since is None:
        return window
    left = window - (now - pending_since)
    return left if left > 0 else None


def decide(job: Obj, observed: Observed, now: dt.datetime, setup: Setup) -> Decision:
    """The decisions of one pass over ``job`` (the cached object: it is not changed)."""
    # The pass gets its own metadata, spec and status to change; templates stay shared (read only).
    own = {**job, "metadata": copy.deepcopy(job["metadata"]), "spec": dict(job.get("spec") or {})}
    info = job_info(own, setup.framework)
    pods = [p for p in observed.pods if replica_of(p) is not None]
    status = copy.deepcopy(job.get("status") or {})
    decision = Decision(Phase.RUNNING, info, status, now, pods, list(observed.services))
    _created(decision)
    if CONDITIONS.is_finished(status):
        return _finished(decision, observed.departed, setup)
    if (info.run_policy.get("suspend") or False) is True:
        return _suspended(decision, setup)
    if cond.is_true(status, cond.SUSPENDED):
        _resumed(decision)
    return _run(decision, observed.departed, setup)


def on_rejection(
    decision: Decision, status: Obj, reason: str, message: str, *, fails_job: bool, setup: Setup
) -> Decision:
    """A child the API server refused: the job fails (``fails_job``), or says why while it retries.

    ``status`` is the status as written so far in the pass. The result is FINISHING, or RUNNING with the
    ``ReplicaFailure`` condition saying why (unchanged when it already says so)."""
    d = decision
    result = Decision(
        Phase.RUNNING, d.info, copy.deepcopy(status), d.now, d.pods, d.services, copies_report=False
    )
    if fails_job:
        kind = d.info.framework.api.kind
        _finish(result, succeeded=False, reason=reason, message=f"{kind} {d.info.name} has failed: {message}")
        _cleanup(result, setup, finished=True)
        return result
    CONDITIONS.set(result.status, cond.REPLICA_FAILURE, reason=reason, message=message, now=result.stamp)
    return result


# -- the phases ------------------------------------------------------------------------------------
def _created(d: Decision) -> None:
    if cond.find(d.status, cond.CREATED) is not None:
        return
    kind, name = d.info.framework.api.kind, d.info.name
    message = f"{kind} {name} is created."
    warning = lopsided_gpu_warning(d.info)
    if warning:
        message += f" Warning: {warning}."
        d.events.append(Event(WARNING, "LopsidedGPURequests", warning))
    CONDITIONS.set(d.status, cond.CREATED, reason=f"{kind}Created", message=message, now=d.stamp)
    d.counters.append(("created", 1))
    d.events.append(Event(NORMAL, f"{kind}Created", message))


def _finished(d: Decision, departed: Sequence[Obj], setup: Setup) -> Decision:
    d.phase = Phase.FINISHED
    _settle_replica_counts(d.status)  # a job that finished before this controller version did so
    # Rank 0's final report can land after the job finished (another replica failed first).
    d.report = observe(d.info, d.pods).report or rank0_report(d.info, departed)
    _cleanup(d, setup, finished=True)
    left = _ttl_left(d)
    d.delete_job = left == 0
    d.requeue_after = left if left else None
    return d


def _suspended(d: Decision, setup: Setup) -> Decision:
    d.phase = Phase.SUSPENDED
    d.copies_report = False
    _cleanup(d, setup, finished=False)
    d.delete_autoscaler = d.info.framework.autoscaler(d.info) is not None
    kind, status = d.info.framework.api.kind, d.status
    for entry in (status.get("replicaStatuses") or {}).values():
        entry.pop("active", None)
    message = f"{kind} {d.info.name} is suspended."
    for ctype in (cond.RUNNING, cond.RESTARTING):
        CONDITIONS.set_false(status, ctype, reason=f"{kind}Suspended", message=message, now=d.stamp)
    if CONDITIONS.set(status, cond.SUSPENDED, reason=f"{kind}Suspended", message=message, now=d.stamp):
        d.events.append(Event(NORMAL, f"{kind}Suspended", message))
    return d


def _resumed(d: Decision) -> None:
    kind = d.info.framework.api.kind
    message, reason = f"{kind} {d.info.name} is resumed.", f"{kind}Resumed"
    CONDITIONS.set(d.status, cond.SUSPENDED, reason=reason, message=message, now=d.stamp, true=False)
    d.status["startTime"] = d.stamp
    d.events.append(Event(NORMAL, reason, message))


def _run(d: Decision, departed: Sequence[Obj], setup: Setup) -> Decision:
    info, status, kind = d.info, d.status, d.info.framework.api.kind
    obs = observe(info, d.pods)
    d.report = obs.report or rank0_report(info, departed)
    new_restarts = _count_restarts(status, obs)
    status["replicaStatuses"] = _replica_statuses(info, obs)
    status.setdefault("startTime", d.stamp)

    succeeded = info.framework.succeeded(info, obs.counts, obs.pods)
    failure = (
        None
        if succeeded
        else fenced_failure(kind, info.name, obs.fenced)
        or _limit_exceeded(d)
        or _permanent_failure(info, obs)
    )
    if failure is not None:
        reason, message = failure
        first = diagnosis.first_failure(
            ((rtype, index, pod) for (rtype, index), pod in sorted(obs.pods.items())),
            containers=reason != cond.DEADLINE_EXCEEDED,
            log_tail=diagnosis.wants_log_tail(info.annotations),
        )
        if first is not None and reason != FENCED:
            status["firstFailure"] = first.as_status()
            message = f"{message}; {first.describe()}"
        _finish(d, succeeded=False, reason=reason, message=message)
        _cleanup(d, setup, finished=True)
        return d
    if succeeded:
        message = f"{kind} {info.name} is successfully completed."
        _finish(d, succeeded=True, reason=f"{kind}Succeeded", message=message)
        _cleanup(d, setup, finished=True)
        return d

    if new_restarts:
        d.counters.append(("restarted", new_restarts))
    _count_disruptions(d, obs)
    stalled, stall_wait = _stall(d, obs)
    if d.phase is Phase.FINISHING:  # stalled once too often
        _cleanup(d, setup, finished=True)
        return d
    if obs.to_restart:
        # Restarting means failed pods are being recreated, as upstream: a container the kubelet restarts
        # in place (a crash-looping OnFailure pod) counts against the backoff limit but leaves the job
        # Running, so the state does not flip with every restart.
        failed_types = sorted({rtype for rtype, _ in obs.to_restart})
        message = (
            f"{kind} {info.name} is restarting because {len(obs.to_restart)} {', '.join(failed_types)} "
            "replica(s) failed."
        )
        CONDITIONS.set(status, cond.RESTARTING, reason=f"{kind}Restarting", message=message, now=d.stamp)
        if new_restarts:
            d.events.append(Event(WARNING, f"{kind}Restarting", message))
    elif info.framework.running(info, obs.counts):
        message = f"{kind} {info.name} is running."
        CONDITIONS.set(status, cond.RUNNING, reason=f"{kind}Running", message=message, now=d.stamp)

    _plan(d, obs, setup)
    d.delete_pods.extend(p for p in stalled if p not in d.delete_pods)
    if setup.gang is not None:
        d.pod_group = setup.gang.pod_group(info)
    d.autoscaler = info.framework.autoscaler(info)
    started = parse_time(status.get("startTime"))
    deadline = seconds_left(started, info.run_policy.get("activeDeadlineSeconds"), d.now)
    d.requeue_after = min((t for t in (deadline, stall_wait) if t is not None), default=None)
    return d


def _stall(d: Decision, obs: Observation) -> tuple[list[Obj], float | None]:
    """The pods to restart because the job stopped reporting progress (``controller.core.stalls``),
    and when to look again; finishes the job (reason ``Stalled``) once it stalled too often."""
    info, status, kind = d.info, d.status, d.info.framework.api.kind
    policy = stalls.StallPolicy.of(info.job)
    left_behind = stalls.left_behind(obs.pods.values(), status) if policy else []
    if left_behind:  # a stall restart whose delete failed: finish it, counted already
        return left_behind, None
    incomplete = len(obs.pods) < sum(r.replicas for r in info.replicas.values())
    if policy is None or obs.to_restart or obs.terminating or obs.disrupted or incomplete:
        return [], None
    stall, wait = stalls.check(policy, {**info.job, "status": status}, obs.pods.values(), d.now)
    if stall is None:
        return [], wait
    message, fails = stalls.record(status, stall, policy, f"{kind} {info.name}", d.stamp)
    if fails:
        _finish(d, succeeded=False, reason=stalls.STALLED, message=message)
        return [], None
    status["restartCount"] = int(status.get("restartCount") or 0) + 1  # a restart like any other
    d.counters.append(("restarted", 1))
    d.events.append(Event(WARNING, stalls.STALLED, message))
    return list(obs.pods.values()), None


def _finish(d: Decision, *, succeeded: bool, reason: str, message: str) -> None:
    d.phase = Phase.FINISHING
    ctype = cond.SUCCEEDED if succeeded else cond.FAILED
    CONDITIONS.set(d.status, ctype, reason=reason, message=message, now=d.stamp)
    d.status.setdefault("completionTime", d.stamp)
    d.finish = Finish(succeeded, reason, message)
    d.requeue_after = _ttl_left(d)
    _settle_replica_counts(d.status)


def _settle_replica_counts(status: Obj) -> None:
    """A finished job reports no active replica: the replicas still running when it finished count as
    succeeded when it succeeded (upstream does the same on every pass over a succeeded job) and as failed
    when it failed, since a failed job's running pods are always stopped (``cleanup_targets``), as the
    Kubernetes Job controller counts the pods it stops when a Job fails. Upstream leaves a failed job's
    ``active`` as it was; docs/job-lifecycle.md says why kubetrain does not."""
    if cond.is_true(status, cond.SUCCEEDED):
        into = "succeeded"
    elif cond.is_true(status, cond.FAILED):
        into = "failed"
    else:
        return
    for entry in (status.get("replicaStatuses") or {}).values():
        active = int(entry.pop("active", 0) or 0)
        if active:
            entry[into] = int(entry.get(into) or 0) + active


def _cleanup(d: Decision, setup: Setup, *, finished: bool) -> None:
    """Delete what ``cleanup_targets`` says, and the pod group."""
    d.cleanup_pods, d.cleanup_services = cleanup_targets(
        d.pods,
        d.services,
        policy=_policy(d.info),
        finished=finished,
        failed=cond.is_true(d.status, cond.FAILED),
    )
    d.delete_pod_group = setup.gang is not None


# -- the pieces of a decision ----------------------------------------------------------------------
def _policy(info: JobInfo) -> str:
    return str(info.run_policy.get("cleanPodPolicy") or "None")


def _ttl_left(d: Decision) -> float | None:
    completed = parse_time(d.status.get("completionTime"))
    return seconds_left(completed, d.info.run_policy.get("ttlSecondsAfterFinished"), d.now)


def _count_restarts(status: Obj, obs: Observation) -> int:
    """Restarts since the last pass (in-place container restarts plus pods to recreate), each pod's
    counted once however often a pass repeats."""
    counted = status.get("countedPodRestarts")
    legacy = counted is None and status.get("restartCount") is not None
    tally = restarts.tally(None if legacy else counted or {}, obs.pod_failures)
    status.pop("observedContainerRestarts", None)  # the bookkeeping before countedPodRestarts
    status["countedPodRestarts"] = tally.counted
    status["restartCount"] = int(status.get("restartCount") or 0) + tally.total
    return tally.total


def _replica_statuses(info: JobInfo, obs: Observation) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for rtype in info.replicas:
        counts = obs.counts.get(rtype)
        entry: dict[str, Any] = {}
        if counts is not None:
            entry.update(
                {
                    k: v
                    for k, v in (
                        ("active", counts.active),
                        ("succeeded", counts.succeeded),
                        ("failed", counts.failed),
                    )
                    if v
                }
            )
        labels = replica_labels(info, rtype)
        entry["selector"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        result[rtype] = entry
    return result


def _limit_exceeded(d: Decision) -> tuple[str, str] | None:
    kind, info, status = d.info.framework.api.kind, d.info, d.status
    limit = info.run_policy.get("backoffLimit")
    restart_count = int(status.get("restartCount") or 0)
    if limit is not None and restart_count > int(limit):
        return (
            "BackoffLimitExceeded",
            f"{kind} {info.name} has failed because it has reached the specified "
            f"backoff limit: {restart_count} restarts, backoffLimit {limit}",
        )
    deadline = info.run_policy.get("activeDeadlineSeconds")
    started = parse_time(status.get("startTime"))
    if deadline is not None and started is not None and (d.now - started).total_seconds() >= int(deadline):
        return (
            cond.DEADLINE_EXCEEDED,
            f"{kind} {info.name} has failed because it was active longer than the "
            f"specified deadline of {deadline}s",
        )
    return None


def _permanent_failure(info: JobInfo, obs: Observation) -> tuple[str, str] | None:
    failures = [f for f in obs.permanent_failures if not info.framework.tolerates_failure(info, f[0])]
    if not failures:
        return None
    kind = info.framework.api.kind
    rtype, pod, code = failures[0]
    count = sum(1 for t, _, _ in failures if t == rtype)
    detail = (
        f"{pod['metadata']['name']} exited with code {code}"
        if code != NO_EXIT_CODE
        else f"{pod['metadata']['name']} failed ({pod.get('status', {}).get('reason') or 'no exit code'})"
    )
    policy = info.replicas[rtype].restart_policy
    return (
        f"{kind}Failed",
        f"{kind} {info.name} has failed because {count} {rtype} replica(s) failed: {detail} (restartPolicy {policy})",
    )


def _count_disruptions(d: Decision, obs: Observation) -> None:
    """Count each disrupted pod once, in ``disruptions`` (never in ``restartCount``), with an Event."""
    kind, status = d.info.framework.api.kind, d.status
    counted = set(status.pop("countedDisruptions", None) or [])
    new = [x for x in obs.disrupted if x.uid not in counted]
    if obs.disrupted:
        status["countedDisruptions"] = sorted({x.uid for x in obs.disrupted})
    if not new:
        return
    status["disruptions"] = int(status.get("disruptions") or 0) + len(new)
    stopped_at = min(parse_time(x.condition.get("lastTransitionTime")) or d.now for x in new)
    cut_short = gpu_seconds([*(x.pod for x in new), *_peers_of_disrupted(obs, d.now)], stopped_at)
    if cut_short:
        status["disruptedGPUSeconds"] = int(status.get("disruptedGPUSeconds") or 0) + cut_short
    d.counters.append(("disrupted", len(new)))
    for x in new:
        message = (
            f"{kind} {d.info.name}: pod {x.pod['metadata']['name']} is stopped by a disruption ({x.why}); "
            "the job's pods are recreated, not counted toward backoffLimit"
        )
        d.events.append(Event(WARNING, f"{kind}Disrupted", message))


def _peers_of_disrupted(obs: Observation, now: dt.datetime) -> list[Obj]:
    """The pods that were running beside a disrupted pod when it was disrupted: they are stopped too.

    The ranks of a distributed job cannot go on without the disrupted one: they would fail at their
    next collective and count as restarts. So they are deleted (a finished one is kept) and every
    replica is recreated. A replacement created in the same second as the disruption (timestamps have
    whole seconds) may be deleted once more, which costs it nothing: it has not started training.
    """
    if not obs.disrupted:
        return []
    since = min(parse_time(x.condition.get("lastTransitionTime")) or now for x in obs.disrupted)
    disrupted = {x.uid for x in obs.disrupted}
    return [
        pod
        for pod in obs.pods.values()
        if pod["metadata"]["uid"] not in disrupted
        and pod.get("status", {}).get("phase") in ("Running", "Pending", None)
        and (parse_time(pod["metadata"].get("creationTimestamp")) or now) <= since
    ]


def _plan(d: Decision, obs: Observation, setup: Setup) -> None:
    info = d.info
    peers = _peers_of_disrupted(obs, d.now)
    evidence = {x.uid for x in obs.disrupted} if peers else set()
    d.delete_pods = [
        *(pod for _, pod in obs.to_restart),
        *(pod for pod in obs.to_recreate if pod["metadata"]["uid"] not in evidence),
        *peers,
        *obs.out_of_range,
    ]
    d.delete_pods_last = [pod for pod in obs.to_recreate if pod["metadata"]["uid"] in evidence]
    existing_services = {
        s["metadata"]["name"]: s for s in d.services if not s["metadata"].get("deletionTimestamp")
    }
    for rtype, replica in info.replicas.items():
        for index in range(replica.replicas):
            identity = (rtype, index)
            if identity not in obs.pods and identity not in obs.terminating:
                d.create_pods.append(build_pod(info, rtype, index, setup.plugins))
            if naming.replica_name(info.name, rtype, index) not in existing_services:
                d.create_services.append(build_service(info, rtype, index))
    wanted = {
        naming.replica_name(info.name, t, i) for t, r in info.replicas.items() for i in range(r.replicas)
    }
    d.delete_services = [s for n, s in existing_services.items() if n not in wanted]


def cleanup_targets(
    pods: list[Obj], services: list[Obj], *, policy: str, finished: bool, failed: bool
) -> tuple[list[Obj], list[Obj]]:
    """The pods and services to delete when a job finishes or is suspended.

    Suspending deletes everything. A finished job follows ``cleanPodPolicy`` (``All``: every pod;
    ``Running``: pods still running or pending; ``None``: none), with one difference from upstream: a
    *failed* job never keeps a pod running, whatever the policy, because a resubmitted attempt would
    train beside it on the same checkpoint dir (docs/job-lifecycle.md). The services of deleted pods go
    with them (all of them under ``All`` and when suspending).
    """
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    running = [p for p in live if p.get("status", {}).get("phase") in ("Running", "Pending", None)]
    if not finished or policy == "All":
        doomed = live
    elif policy == "Running" or failed:
        doomed = running
    else:
        doomed = []
    names = {p["metadata"]["name"] for p in doomed}
    everything = not finished or policy == "All"
    doomed_services = [
        s
        for s in services
        if not s["metadata"].get("deletionTimestamp") and (everything or s["metadata"]["name"] in names)
    ]
    return doomed, doomed_services
