"""What one reconcile of a TrainJob decides, as a pure function: ``decide``.

``decide(job, observed, now, setup)`` reads the TrainJob, what the pass found of
its runtime and how it built (``kubetrain.trainjob.build``), its pods and the time, and
returns a ``Decision``: the status to write, the Events and counters to record,
rank 0's report to copy, the pods to create and delete, what a finished
TrainJob's TTLs delete, and when to look again. It does no I/O, so every rule
of the lifecycle is unit-tested pass by pass
(``tests/unit/controller/test_trainjob_decisions.py``); ``trainjob.reconciler``
observes, and carries a Decision out. The JobSet and Job controller semantics
it applies are ``trainjob.jobset``.

The rules, in the order they apply (docs/trainjob.md says them for users):

1. a finished TrainJob: copy rank 0's last report, stop the pods that still
   run, settle its child Jobs' counts; once the runtime's
   ``ttlSecondsAfterFinished`` has passed, delete what JobSet's deletion would
   take with it; once ``kubetrain.dev/ttl-seconds-after-finished`` has passed,
   delete the TrainJob, unless that would delete the claim holding its output
   (``DeletionHeld`` says so instead);
2. no runtime to build from: a missing one is waited for (``Created=False``),
   one of a kind kubetrain does not run fails the TrainJob; a TrainJob that
   cannot be built (``BuildError``), or whose snapshot's name is taken, fails;
3. suspended: its pods go; resumed: the deadline clock restarts;
4. past ``spec.activeDeadlineSeconds``: Failed, reason ``DeadlineExceeded``;
5. otherwise digest the pods into child Jobs (``jobset.observe``) and decide,
   in this order: a newer attempt fenced it off its checkpoint directory (it
   fails); a disruption restarts the attempt, not counted; failed child Jobs
   restart it or fail the TrainJob (the runtime's ``failurePolicy``); every
   Job succeeded (it completes); it reported no progress for its stall timeout
   (a counted restart, or Failed ``Stalled`` once too often); the pods of an
   earlier attempt go before new ones come; else create the pods whose
   dependencies are met, and look again at the next deadline.

A TrainJob that finishes is cleaned up only after its terminal status is written
(``JobReconciler.finish``). A child the API server refuses for good is a
decision too: ``on_rejection``.
"""

from __future__ import annotations

import copy
import datetime as dt
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubetrain import naming
from kubetrain.api.kinds import TRAINJOB
from kubetrain.api.objects import Obj
from kubetrain.client.kinds import disruption
from kubetrain.controller import diagnosis
from kubetrain.controller.core import conditions as cond
from kubetrain.controller.core import stalls
from kubetrain.controller.core.conditions import COMPLETE, CREATED, FAILED, REPLICA_FAILURE, SUSPENDED
from kubetrain.controller.core.observe import fenced_failure, fenced_off, termination_report
from kubetrain.controller.core.skeleton import parse_time, rfc3339, seconds_left
from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.plugins.gang import GangScheduler, TrainJobGangPlugin, trainjob_gang
from kubetrain.controller.plugins.gpu import GpuPlugin
from kubetrain.controller.plugins.logtail import LogTailPlugin
from kubetrain.controller.state import PodPlugin
from kubetrain.controller.trainjob import jobset
from kubetrain.controller.v1.decisions import Event, Finish
from kubetrain.kube.events import NORMAL, WARNING
from kubetrain.kube.resources import PVCS
from kubetrain.trainjob.outputs import outputs_at_risk
from kubetrain.trainjob.state import NODE, TrainJobInfo

CONDITIONS = cond.TRAINJOB  # a TrainJob has Created only while its runtime is missing (upstream has none)
RUNTIME_NOT_FOUND = "TrainingRuntimeNotFound"
RUNTIME_NOT_SUPPORTED = "TrainingRuntimeNotSupported"
BUILD_ERROR = "BuildError"
RUNTIME_MISSING_RETRY = 10.0


class Phase(enum.Enum):
    """Where the TrainJob is, which decides the order its writes are made in."""

    FINISHED = "finished"  # it had finished before this pass
    UNRESOLVED = "unresolved"  # its runtime is missing (it waits), or of a kind kubetrain does not run
    SUSPENDED = "suspended"
    FINISHING = "finishing"  # it finishes in this pass
    REPLACING = "replacing"  # pods go once the status is written (a restart, an earlier attempt's pods)
    RUNNING = "running"


Counter = Literal["restarted", "disrupted"]


@dataclass(frozen=True)
class Setup:
    """What the controller was started with, for TrainJobs."""

    gang: GangScheduler | None = None  # the configured gang scheduler (``--gang-scheduler-name``)
    status_server: PodPlugin | None = None  # progress reports (docs/observability.md)


@dataclass(frozen=True)
class Unbuilt:
    """Why an unfinished TrainJob has no build in this pass: ``reason`` is ``RUNTIME_NOT_FOUND``,
    ``RUNTIME_NOT_SUPPORTED``, ``BUILD_ERROR``, or that of the refusal of its runtime snapshot."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    """What the pass found: the TrainJob's pods, its build, and the pods deleted since the last pass."""

    pods: Sequence[Obj]  # the pods the TrainJob controls
    info: TrainJobInfo | None = None  # built against its runtime (a finished one: its snapshot, if any)
    unbuilt: Unbuilt | None = None  # an unfinished TrainJob without ``info``: why
    runtime_found: bool = False  # the live runtime was found, and snapshotted, in this pass
    departed: Sequence[Obj] = ()  # deleted pods that left a report no pass has copied yet


@dataclass(frozen=True)
class Restart:
    """A restart of the whole TrainJob: every pod goes, the next ones are of restart attempt ``attempt``."""

    attempt: int
    message: str


@dataclass(frozen=True)
class Expiry:
    """What the runtime's ``ttlSecondsAfterFinished`` deletes once it has passed, as JobSet's deletion
    would: every pod, finished ones too, the headless Service, and the claims the TrainJob owns (except
    the one holding its output); the TrainJob stays."""

    pods: list[Obj]
    service: str  # the headless Service's name
    claims: list[str]


@dataclass
class Decision:
    """Everything one pass decided; ``trainjob.reconciler`` carries it out."""

    phase: Phase
    job: Obj  # the TrainJob as decided on (the pass's copy: not changed here)
    status: Obj  # the status to write
    now: dt.datetime
    pods: list[Obj]  # the pods it was decided on
    info: TrainJobInfo | None = None
    gang: GangScheduler | None = None  # the pod group's scheduler (the runtime's podGroupPolicy)
    events: list[Event] = field(default_factory=list)  # recorded at once
    counters: list[tuple[Counter, int]] = field(default_factory=list)  # counted at once
    report: dict[str, Any] | None = None  # rank 0's report, to copy into the TrainJob (None: nothing new)
    copies_report: bool = False  # whether this pass copies the report (and so uses up the departed pods)
    finish: Finish | None = None
    restart: Restart | None = None
    create_pods: list[Obj] = field(default_factory=list)  # alongside the status write
    delete_pods: list[Obj] = field(default_factory=list)  # after the status write
    cleanup_pods: list[Obj] = field(default_factory=list)  # finished: the pods still running go
    expiry: Expiry | None = None  # the runtime's TTL passed: delete what JobSet's deletion would
    deletion_held: str | None = None  # why it is kept although its TTL passed: news (an Event) of this pass
    delete_job: bool = False  # its TTL has passed
    requeue_after: float | None = None

    @property
    def stamp(self) -> str:
        return rfc3339(self.now)

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def key(self) -> str:
        return f"{self.job['metadata']['namespace']}/{self.name}"

    @property
    def framework(self) -> str:
        """The framework label of the TrainJob's metrics: its runtime's, else ``trainjob``."""
        return "trainjob" if self.info is None else framework_of(self.info.runtime)

    def after_creates(self) -> Obj:
        """The status once the pods could be created: a ``ReplicaFailure`` from refused creates is over."""
        status = copy.deepcopy(self.status)
        cond.remove(status, REPLICA_FAILURE)
        return status


def decide(job: Obj, observed: Observed, now: dt.datetime, setup: Setup) -> Decision:
    """The decisions of one pass over ``job`` (the pass's copy, built into ``observed.info``: not changed)."""
    status = copy.deepcopy(job.get("status") or {})
    d = Decision(Phase.RUNNING, job, status, now, list(observed.pods), observed.info)
    if CONDITIONS.is_finished(status):
        return _finished(d, observed.departed, setup)
    if observed.runtime_found:
        cond.remove(status, CREATED)
    if observed.unbuilt is not None:
        return _unbuilt(d, observed.unbuilt)
    info = observed.info
    assert info is not None, "an unfinished TrainJob is either built or says why not"
    d.gang = trainjob_gang(info.gang_policy, setup.gang)
    if (job.get("spec") or {}).get("suspend") is True:
        return _suspended(d, info)
    if cond.is_true(status, SUSPENDED):
        CONDITIONS.set(
            status, SUSPENDED, true=False, reason="Resumed", message="TrainJob is resumed", now=d.stamp
        )
        d.events.append(Event(NORMAL, "Resumed", f"TrainJob {info.name} is resumed"))
    deadline = _deadline(d)
    if deadline is not None and deadline <= 0:
        limit = job["spec"]["activeDeadlineSeconds"]
        _finish(
            d,
            complete=False,
            reason=cond.DEADLINE_EXCEEDED,
            message=f"TrainJob exceeded its active deadline of {limit}s",
        )
        return d
    _run(d, info, observed.departed, setup)
    d.requeue_after = _soonest(d.requeue_after, deadline)
    return d


def on_rejection(decision: Decision, status: Obj, reason: str, message: str, *, fails_job: bool) -> Decision:
    """A child the API server refused: the TrainJob fails (``fails_job``), or says why while it retries.

    ``status`` is the status as written so far in the pass. The result is FINISHING, or RUNNING with the
    ``ReplicaFailure`` condition saying why (unchanged when it already says so)."""
    d = decision
    result = Decision(Phase.RUNNING, d.job, copy.deepcopy(status), d.now, d.pods, d.info, d.gang)
    if fails_job:
        _finish(result, complete=False, reason=reason, message=f"TrainJob {d.key} has failed: {message}")
        return result
    CONDITIONS.set(
        result.status, REPLICA_FAILURE, true=True, reason=reason, message=message, now=result.stamp
    )
    return result


# -- the phases ------------------------------------------------------------------------------------
def _finished(d: Decision, departed: Sequence[Obj], setup: Setup) -> Decision:
    d.phase = Phase.FINISHED
    info, status = d.info, d.status
    at_risk: tuple[str, str] | None = None
    jobset_ttl: float | None = None
    if info is not None:
        d.gang = trainjob_gang(info.gang_policy, setup.gang)
        obs = jobset.observe(info, d.pods, int(status.get("restarts") or 0))
        d.report = _rank0_report(info, obs, departed)  # it can land after another pod failed the job
        d.copies_report = True
        at_risk = outputs_at_risk(info)
        jobset_ttl = _jobset_ttl(d, info, keep=None if at_risk is None else at_risk[1])
    d.cleanup_pods = _running(d.pods)
    # A TrainJob that finished before this controller version settled its counts gets them settled.
    jobset.settle_jobs_status(status.get("jobsStatus") or [], complete=cond.is_true(status, COMPLETE))
    ttl = _ttl_left(d)
    d.delete_job = ttl == 0
    if d.delete_job and at_risk is not None:
        d.delete_job = False
        _hold_deletion(d, *at_risk)
    d.requeue_after = None if d.delete_job else _soonest(None if ttl == 0 else ttl, jobset_ttl)
    return d


def _unbuilt(d: Decision, unbuilt: Unbuilt) -> Decision:
    """No build: wait for a missing runtime, fail on an unsupported one, or fail for what the build or
    the runtime snapshot met."""
    status, message = d.status, unbuilt.message
    if unbuilt.reason == RUNTIME_NOT_FOUND:
        d.phase = Phase.UNRESOLVED
        CONDITIONS.set(status, CREATED, true=False, reason=RUNTIME_NOT_FOUND, message=message, now=d.stamp)
        d.events.append(Event(WARNING, "TrainJobResourcesCreationFailed", message))
        d.requeue_after = RUNTIME_MISSING_RETRY
    elif unbuilt.reason == RUNTIME_NOT_SUPPORTED:
        d.phase = Phase.UNRESOLVED  # failed, though nothing was ever created to clean up
        if CONDITIONS.set(
            status, FAILED, true=True, reason=RUNTIME_NOT_SUPPORTED, message=message, now=d.stamp
        ):
            d.events.append(Event(WARNING, RUNTIME_NOT_SUPPORTED, message))
        d.requeue_after = _ttl_left(d)
    elif unbuilt.reason == BUILD_ERROR:
        d.events.append(Event(WARNING, "TrainJobResourcesCreationFailed", message))
        _finish(d, complete=False, reason=BUILD_ERROR, message=f"TrainJob {d.key} cannot be built: {message}")
    else:  # the runtime snapshot's name is someone else's
        _finish(d, complete=False, reason=unbuilt.reason, message=f"TrainJob {d.key} has failed: {message}")
    return d


def _suspended(d: Decision, info: TrainJobInfo) -> Decision:
    d.phase = Phase.SUSPENDED
    status = d.status
    obs = jobset.observe(info, [], int(status.get("restarts") or 0))
    status["jobsStatus"] = jobset.jobs_status(info, obs, suspended=True)
    status.pop("jobStartTimes", None)  # a resumed Job's deadline counts from its resumption
    if CONDITIONS.set(
        status, SUSPENDED, true=True, reason="Suspended", message="TrainJob is suspended", now=d.stamp
    ):
        d.events.append(Event(NORMAL, "Suspended", f"TrainJob {info.name} is suspended"))
    d.delete_pods = _live(d.pods)
    return d


def _run(d: Decision, info: TrainJobInfo, departed: Sequence[Obj], setup: Setup) -> None:
    status = d.status
    attempt = int(status.get("restarts") or 0)
    legacy = status.get("countedPodRestarts") is None and status.get("jobsStatus") is not None
    obs = jobset.observe(
        info,
        d.pods,
        attempt,
        job_failures=status.get("jobFailures"),
        counted=None if legacy else status.get("countedPodRestarts") or {},
        failed_indexes=status.get("failedIndexes"),
        started=status.get("jobStartTimes"),
        now=d.now,
    )
    d.report = _rank0_report(info, obs, departed)
    d.copies_report = True
    _record(status, info, obs)
    fenced = fenced_failure(TRAINJOB.kind, info.name, _fenced_pods(obs))
    if fenced is not None:
        _finish(d, complete=False, reason=fenced[0], message=fenced[1])
        return
    if _restart_or_fail(d, info, obs, attempt):
        return
    if jobset.succeeded(info, obs):
        message = f"TrainJob {info.name} completed: every job succeeded"
        _finish(d, complete=True, reason="AllJobsCompleted", message=message)
        return
    stalled, stall_wait = _stall(d, info, obs, attempt)
    if stalled:
        return
    if obs.stale or obs.terminating_stale:
        # Pods of an earlier restart attempt hold the hostnames; new pods wait until they are gone.
        d.phase = Phase.REPLACING
        d.delete_pods = list(obs.stale)
        return
    plugins = _plugins(d.gang, setup)
    d.create_pods = [
        jobset.build_pod(info, child, index, attempt=attempt, plugins=plugins)
        for child in obs.jobs
        if not child.complete and jobset.depends_on_met(info, child.pod_set, obs)
        for index in child.missing()
    ]
    # a child Job's activeDeadlineSeconds, or when the job could next be stalled
    d.requeue_after = _soonest(obs.next_deadline(d.now), stall_wait)


def _restart_or_fail(d: Decision, info: TrainJobInfo, obs: jobset.Observation, attempt: int) -> bool:
    """Restart the attempt for a disruption (uncounted) or failed child Jobs (per ``failurePolicy``),
    or fail the TrainJob; False when the attempt goes on."""
    status = d.status
    if obs.disrupted:
        names = ", ".join(f"{p['metadata']['name']} ({disruption(p)})" for p in obs.disrupted)
        status["disruptions"] = int(status.get("disruptions") or 0) + len(obs.disrupted)
        cut_short = jobset.disrupted_gpu_seconds(d.pods, obs, d.now)
        if cut_short:
            status["disruptedGPUSeconds"] = int(status.get("disruptedGPUSeconds") or 0) + cut_short
        d.counters.append(("disrupted", len(obs.disrupted)))
        message = f"TrainJob {info.name}: stopped by a disruption: {names}; restarting all pods, not counted"
        _restart(d, attempt, "Disrupted", message, counts=False)
        return True
    failed = [j for j in obs.jobs if j.failed]
    if not failed:
        return False
    decision = jobset.on_job_failure(info, failed, int(status.get("restartsCountTowardsMax") or 0))
    if not decision.restart:
        _finish(d, complete=False, reason=decision.reason, message=decision.message)
        return True
    d.counters.append(("restarted", 1))
    _restart(d, attempt, "Restarting", decision.message, counts=decision.counts)
    return True


def _stall(
    d: Decision, info: TrainJobInfo, obs: jobset.Observation, attempt: int
) -> tuple[bool, float | None]:
    """Restart the attempt (counted) when every pod runs but nothing was reported for the stall
    timeout, or fail the TrainJob once it stalled too often (True either way); else when to look again."""
    policy = stalls.StallPolicy.of(d.job)
    if policy is None or obs.stale or obs.terminating_stale:
        return False, None
    live = [p for j in obs.jobs for p in j.live.values()]
    if len(live) < sum(s.replicas * s.count for s in info.pod_sets):
        return False, None
    stall, wait = stalls.check(policy, {**d.job, "status": d.status}, live, d.now)
    if stall is None:
        return False, wait
    message, fails = stalls.record(d.status, stall, policy, f"TrainJob {info.name}", d.stamp)
    if fails:
        _finish(d, complete=False, reason=stalls.STALLED, message=message)
        return True, None
    d.counters.append(("restarted", 1))
    _restart(d, attempt, stalls.STALLED, message, counts=True)
    return True, None


def _restart(d: Decision, attempt: int, reason: str, message: str, *, counts: bool) -> None:
    """Start restart attempt ``attempt + 1``: every pod goes, new ones get the attempt's label."""
    status = d.status
    status["restarts"] = attempt + 1
    status["jobFailures"] = {}  # a new attempt: new child Jobs, new counts
    status["countedPodRestarts"] = {}
    for key in ("failedIndexes", "jobStartTimes"):
        status.pop(key, None)
    if counts:
        status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax") or 0) + 1
    d.events.append(Event(WARNING, reason, message))
    d.phase = Phase.REPLACING
    d.restart = Restart(attempt + 1, message)
    d.delete_pods = _live(d.pods)


def _finish(d: Decision, *, complete: bool, reason: str, message: str) -> None:
    """Finish the TrainJob in this pass: its terminal status, then its running pods go."""
    d.phase = Phase.FINISHING
    status = d.status
    cond.remove(status, REPLICA_FAILURE)  # a finished job creates nothing more
    if not complete:
        first = diagnosis.first_failure(
            _replicas(d.pods),
            containers=reason != cond.DEADLINE_EXCEEDED,
            log_tail=diagnosis.wants_log_tail(d.job["metadata"].get("annotations") or {}),
        )
        if first is not None:
            status["firstFailure"] = first.as_status()
            message = f"{message}; {first.describe()}"
    CONDITIONS.set(
        status, COMPLETE if complete else FAILED, true=True, reason=reason, message=message, now=d.stamp
    )
    jobset.settle_jobs_status(status.get("jobsStatus") or [], complete=complete)
    d.finish = Finish(complete, reason, message)
    d.cleanup_pods = _running(d.pods)
    d.requeue_after = _ttl_left(d)


def _hold_deletion(d: Decision, path: str, claim: str) -> None:
    """The TTL passed, but deleting the TrainJob would delete ``claim`` (its runtime's
    ``volumeClaimPolicies`` own it) and ``path`` on it: keep the TrainJob, saying why."""
    message = (
        f"{naming.ANNOTATION_TTL_AFTER_FINISHED} passed, but deleting TrainJob {d.name} would delete "
        f"the claim {claim}, which holds {path}; the TrainJob is kept. Copy the output and delete the "
        "TrainJob yourself, or run on a runtime that retains the claim (retentionPolicy.whenDeleted: Retain)"
    )
    if cond.note_on_finished(
        d.status, cond.DELETION_HELD, reason="OutputOnOwnedClaim", message=message, now=d.stamp
    ):
        d.deletion_held = message


# -- the pieces of a decision ----------------------------------------------------------------------
def _jobset_ttl(d: Decision, info: TrainJobInfo, *, keep: str | None) -> float | None:
    """The runtime's ``ttlSecondsAfterFinished`` (JobSet's): once it has passed, the ``Expiry`` of what
    JobSet's deletion takes with it, except ``keep``, the claim that holds the job's output. Before
    that, the seconds until it will have passed."""
    limit = (info.jobset.get("spec") or {}).get("ttlSecondsAfterFinished")
    left = seconds_left(_finished_at(d.status), limit, d.now)
    if left is None or left > 0:
        return left
    claims = [
        extra.name
        for extra in info.extras
        if extra.resource is PVCS and not extra.retained and extra.name != keep
    ]
    d.expiry = Expiry(_live(d.pods), info.subdomain, claims)
    return None


def _deadline(d: Decision) -> float | None:
    """Seconds left before ``spec.activeDeadlineSeconds`` (the clock restarts on every resume)."""
    limit = (d.job.get("spec") or {}).get("activeDeadlineSeconds")
    if not limit:
        return None
    resumed = cond.find(d.status, SUSPENDED)
    start = parse_time(
        resumed.get("lastTransitionTime")
        if resumed is not None and resumed.get("status") == "False"
        else d.job["metadata"].get("creationTimestamp")
    )
    return seconds_left(start, limit, d.now)


def _finished_at(status: Obj) -> dt.datetime | None:
    finished = cond.find(status, COMPLETE if cond.is_true(status, COMPLETE) else FAILED)
    return None if finished is None else parse_time(finished.get("lastTransitionTime"))


def _ttl_left(d: Decision) -> float | None:
    """Seconds until ``kubetrain.dev/ttl-seconds-after-finished`` passes (0 once it has)."""
    ttl = (d.job["metadata"].get("annotations") or {}).get(naming.ANNOTATION_TTL_AFTER_FINISHED)
    finished = _finished_at(d.status)
    if ttl is None or not ttl.isdigit() or finished is None:
        return None
    return seconds_left(finished, ttl, d.now)


def _soonest(*delays: float | None) -> float | None:
    known = [delay for delay in delays if delay is not None]
    return min(known) if known else None


def _live(pods: Sequence[Obj]) -> list[Obj]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _running(pods: Sequence[Obj]) -> list[Obj]:
    """The pods a finished TrainJob stops: those still running (finished pods stay, for their logs)."""
    return [p for p in _live(pods) if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]


def _plugins(gang: GangScheduler | None, setup: Setup) -> list[PodPlugin]:
    plugins: list[PodPlugin] = [CheckpointPlugin(), GpuPlugin(), LogTailPlugin()]
    if gang is not None:
        plugins.append(TrainJobGangPlugin(gang))
    if setup.status_server is not None:
        plugins.append(setup.status_server)
    return plugins


def _rank0_report(
    info: TrainJobInfo, obs: jobset.Observation, departed: Sequence[Obj]
) -> dict[str, Any] | None:
    """Rank 0's report, from its pods, or else from a deleted one (``DepartedPods``).

    A pod being deleted still counts: the controller stops a failed job's pods, and rank 0 writes its
    report as it exits."""
    trainer = info.trainer()
    if trainer is None:
        return None
    rank0 = next((j for j in obs.jobs if j.pod_set is trainer and j.index == 0), None)
    candidates = [pod for pod in departed if jobset.is_rank0(pod, trainer)]
    if rank0 is not None:
        candidates += [
            *rank0.failed_pods.get(0, []),
            *([rank0.live[0]] if 0 in rank0.live else []),
            *([rank0.terminating[0]] if 0 in rank0.terminating else []),
        ]
    report = None
    for pod in candidates:
        report = termination_report(pod, NODE) or report
    return report


def _record(status: Obj, info: TrainJobInfo, obs: jobset.Observation) -> None:
    """Write what the pass observed into the status: each child Job's counts and the bookkeeping the
    next pass reads back (failures, restarts counted, failed indexes, start times)."""
    status["jobsStatus"] = jobset.jobs_status(info, obs)
    status["jobFailures"] = obs.job_failures
    status["countedPodRestarts"] = obs.counted
    _set_or_drop(status, "failedIndexes", obs.failed_indexes)
    _set_or_drop(status, "jobStartTimes", obs.start_times)


def _fenced_pods(obs: jobset.Observation) -> list[str]:
    """The pods, live or failed, that were fenced off their checkpoint (a newer attempt writes it)."""
    return [
        p["metadata"]["name"]
        for j in obs.jobs
        for p in [*j.live.values(), *(f for fs in j.failed_pods.values() for f in fs)]
        if fenced_off(p)
    ]


def _set_or_drop(status: Obj, key: str, value: Obj) -> None:
    if value:
        status[key] = value
    else:
        status.pop(key, None)


def framework_of(runtime: Obj) -> str:
    """The framework label of a runtime's TrainJobs (``trainer.kubeflow.org/framework``)."""
    labels: dict[str, Any] = (runtime.get("metadata") or {}).get("labels") or {}
    return str(labels.get(naming.LABEL_TRAINER_FRAMEWORK) or "trainjob")


def _replicas(pods: list[Obj]) -> list[tuple[str, int, Obj]]:
    """``(replicated job, completion index, pod)`` of the pods of the current attempt, for the diagnosis."""
    found = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        rjob, index = labels.get(naming.JOBSET_REPLICATED_JOB), labels.get(naming.JOB_COMPLETION_INDEX)
        if rjob and index and index.isdigit() and not pod["metadata"].get("deletionTimestamp"):
            found.append((rjob, int(index), pod))
    return sorted(found, key=lambda f: (f[0], f[1]))
