"""The Kubernetes Job controller's rules for one Indexed child Job of a TrainJob, over its pods.

Upstream's JobSet writes a ``batch/v1`` Job per replicated job replica and the Job
controller runs it; kubetrain creates the pods itself, so this module decides what
the Job controller would, from the Job template the runtime gives:

* **completion**: every completion index has a Succeeded pod;
* **backoffLimit** (default 6; unlimited when only ``backoffLimitPerIndex`` is
  set): the Job fails (``BackoffLimitExceeded``) once its counted failures (failed
  pods and in-place container restarts) pass it;
* **podFailurePolicy**: a failed pod takes the action of the first rule it
  matches, by container exit code or pod condition: ``FailJob`` fails the Job at
  once (``PodFailurePolicy``), ``Ignore`` neither counts nor stops the pod from
  being replaced, ``FailIndex`` fails the pod's index, ``Count`` (also when no
  rule matches) counts it;
* **backoffLimitPerIndex**: an index whose failures pass it fails and gets no new
  pod; the other indexes run on, and the Job fails (``FailedIndexes``) once every
  index finished, or as soon as more indexes failed than ``maxFailedIndexes``
  (``MaxFailedIndexesExceeded``). Each pod carries its index's failure counts in
  the Job controller's annotations, so a replacement knows its predecessors' even
  after they are garbage-collected;
* **activeDeadlineSeconds**: the Job fails (``DeadlineExceeded``) once it has been
  active that long, counted from its first pod of the restart attempt.

The failure reasons and messages are the Job controller's, so a JobSet
``failurePolicy`` rule (``onJobFailureReasons``, ``onJobFailureMessagePatterns``)
matches them as it would upstream. Kubernetes requires ``restartPolicy: Never`` for
``podFailurePolicy`` and ``backoffLimitPerIndex``; the runtime CRD checks it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming
from kubetrain.api import v2
from kubetrain.api.objects import Obj
from kubetrain.controller.core.observe import NO_EXIT_CODE, exit_code
from kubetrain.controller.core.skeleton import parse_time
from kubetrain.trainjob.state import DEFAULT_BACKOFF_LIMIT, NODE, PodSet

# The reasons a failed Job gives, as the Job controller words them (JobSet's rules match on these).
BACKOFF_LIMIT_EXCEEDED, DEADLINE_EXCEEDED, FAILED_INDEXES, MAX_FAILED_INDEXES_EXCEEDED, POD_FAILURE_POLICY = (
    v2.JOB_FAILURE_REASONS
)
_MESSAGES = {
    BACKOFF_LIMIT_EXCEEDED: "Job has reached the specified backoff limit",
    DEADLINE_EXCEEDED: "Job was active longer than specified deadline",
    FAILED_INDEXES: "Job has failed indexes",
    MAX_FAILED_INDEXES_EXCEEDED: "Job has exceeded the specified maximal number of failed indexes",
}

FAIL_JOB, FAIL_INDEX, IGNORE, COUNT = "FailJob", "FailIndex", "Ignore", "Count"


# -- the Job template's rules ---------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """What the runtime's Job template says about failures and time."""

    backoff_limit: int | None  # None: unlimited
    per_index: int | None
    max_failed_indexes: int | None
    deadline: int | None
    pod_failure_policy: Obj | None

    @classmethod
    def of(cls, pod_set: PodSet) -> Limits:
        spec = pod_set.job_spec
        per_index = spec.get("backoffLimitPerIndex")
        backoff = spec.get("backoffLimit")
        if backoff is None and per_index is None:
            backoff = DEFAULT_BACKOFF_LIMIT
        return cls(
            backoff_limit=None if backoff is None else int(backoff),
            per_index=None if per_index is None else int(per_index),
            max_failed_indexes=_int_or_none(spec.get("maxFailedIndexes")),
            deadline=_int_or_none(spec.get("activeDeadlineSeconds")),
            pod_failure_policy=spec.get("podFailurePolicy"),
        )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class PodVerdict:
    """What a failed pod means to its Job: the action of the rule it matched, and for ``FailJob`` why."""

    action: str
    message: str | None = None


def judge_failed_pod(policy: Obj | None, pod: Obj) -> PodVerdict:
    """The action of the first ``podFailurePolicy`` rule a failed pod matches (``Count`` when none)."""
    meta, status = pod["metadata"], pod.get("status") or {}
    for i, rule in enumerate((policy or {}).get("rules") or []):
        action = str(rule.get("action"))
        on_codes = rule.get("onExitCodes")
        if on_codes is not None:
            matched = _matching_container(status, on_codes)
            if matched is not None:
                name, code = matched
                return PodVerdict(
                    action,
                    f"Container {name} for pod {meta.get('namespace')}/{meta['name']} failed with exit code "
                    f"{code} matching {action} rule at index {i}",
                )
            continue
        condition = _matching_condition(status, rule.get("onPodConditions") or [])
        if condition is not None:
            return PodVerdict(
                action,
                f"Pod {meta.get('namespace')}/{meta['name']} has condition {condition} matching {action} rule "
                f"at index {i}",
            )
    return PodVerdict(COUNT)


def _matching_container(status: Obj, requirement: Obj) -> tuple[str, int] | None:
    """The first container (then init container) that exited non-zero as ``onExitCodes`` says."""
    name = requirement.get("containerName")
    values = {int(v) for v in requirement.get("values") or []}
    inside = requirement.get("operator") == "In"
    for statuses in (status.get("containerStatuses") or [], status.get("initContainerStatuses") or []):
        for container in statuses:
            if name is not None and container.get("name") != name:
                continue
            terminated = (container.get("state") or {}).get("terminated")
            if terminated is None or not terminated.get("exitCode"):
                continue  # running, or succeeded: exit code 0 never matches
            code = int(terminated["exitCode"])
            if (code in values) == inside:
                return str(container.get("name")), code
    return None


def _matching_condition(status: Obj, patterns: list[Obj]) -> str | None:
    for condition in status.get("conditions") or []:
        for pattern in patterns:
            if condition.get("type") == pattern.get("type") and condition.get("status") == (
                pattern.get("status") or "True"
            ):
                return str(condition.get("type"))
    return None


def index_counts(pod: Obj) -> tuple[int, int]:
    """The failures and ignored failures of a pod's index before it (the Job controller's annotations)."""
    annotations = pod["metadata"].get("annotations") or {}

    def count(key: str) -> int:
        value = str(annotations.get(key) or "0")
        return int(value) if value.isdigit() else 0

    return count(naming.JOB_INDEX_FAILURE_COUNT), count(naming.JOB_INDEX_IGNORED_FAILURE_COUNT)


# -- one child Job --------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobFailure:
    """Why a child Job failed: the Job controller's reason and message, and what kubetrain saw."""

    reason: str
    message: str  # the Job controller's words: what onJobFailureMessagePatterns match
    summary: str  # the limit that was reached
    cause: str | None = None  # the failure that reached it

    def describe(self) -> str:
        """``(<reason>: <summary>)`` and the cause, for the TrainJob's condition."""
        return f"({self.reason}: {self.summary})" + (f": {self.cause}" if self.cause else "")


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
    failures: int = 0  # counted failed pods and container restarts so far, each counted once
    # Per index: (failures, ignored failures) so far, from the pods' annotations and their own failure.
    index_failures: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed_indexes: set[int] = field(default_factory=set)  # backoffLimitPerIndex / FailIndex
    fail_job: str | None = None  # a FailJob rule's message
    started: dt.datetime | None = None  # its first pod of the attempt was created
    failure: JobFailure | None = None  # set by ``judge``

    @property
    def name(self) -> str:
        return f"{self.pod_set.name}-{self.index}"

    @property
    def limits(self) -> Limits:
        return Limits.of(self.pod_set)

    @property
    def complete(self) -> bool:
        return not self.failed_indexes and len(self.succeeded) >= self.pod_set.count

    @property
    def failed(self) -> bool:
        return self.failure is not None

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
        """Indexes that need a new pod: none running, none succeeded or failed, none still going away."""
        return [
            i
            for i in range(self.pod_set.count)
            if i not in self.live
            and i not in self.succeeded
            and i not in self.terminating
            and i not in self.failed_indexes
        ]

    def retry(self, index: int) -> tuple[int, int]:
        """The failure counts a new pod of ``index`` carries (its predecessors' failures and ignored ones)."""
        return self.index_failures.get(index, (0, 0))

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

    def deadline_left(self, now: dt.datetime) -> float | None:
        """Seconds before ``activeDeadlineSeconds`` passes (None: no deadline, or not started)."""
        deadline = self.limits.deadline
        if deadline is None or self.started is None or self.complete:
            return None
        return max(0.0, deadline - (now - self.started).total_seconds())


def _is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def judge(job: ChildJob, now: dt.datetime | None) -> None:
    """Decide whether the child Job failed, as the Job controller would (sets ``job.failure``)."""
    limits = job.limits
    if limits.per_index is not None:
        for index, (failures, _) in job.index_failures.items():
            if failures > limits.per_index:
                job.failed_indexes.add(index)
    job.failure = _failure(job, limits, now)


def _failure(job: ChildJob, limits: Limits, now: dt.datetime | None) -> JobFailure | None:
    """Why the Job failed, if it did, by the Job controller's precedence."""
    if job.complete:
        return None
    if job.fail_job is not None:
        return JobFailure(POD_FAILURE_POLICY, job.fail_job, job.fail_job)
    failed = sorted(job.failed_indexes)
    finished = job.succeeded | job.failed_indexes
    ladder = (  # (whether it holds, reason, summary), the first that holds wins
        (
            limits.max_failed_indexes is not None and len(failed) > limits.max_failed_indexes,
            MAX_FAILED_INDEXES_EXCEEDED,
            f"{len(failed)} failed indexes ({_listed(failed)}), maxFailedIndexes {limits.max_failed_indexes}",
        ),
        (
            limits.backoff_limit is not None and job.failures > limits.backoff_limit,
            BACKOFF_LIMIT_EXCEEDED,
            f"{job.failures} failure(s), backoffLimit {limits.backoff_limit}",
        ),
        (
            now is not None and job.deadline_left(now) == 0,
            DEADLINE_EXCEEDED,
            f"active longer than activeDeadlineSeconds {limits.deadline}",
        ),
        (
            bool(failed) and all(i in finished for i in range(job.pod_set.count)),
            FAILED_INDEXES,
            f"indexes {_listed(failed)} failed, backoffLimitPerIndex {limits.per_index}",
        ),
    )
    for holds, reason, summary in ladder:
        if holds:  # a deadline has no pod to blame
            return _known(reason, summary, None if reason == DEADLINE_EXCEEDED else job.failure_detail())
    return None


def _known(reason: str, summary: str, cause: str | None = None) -> JobFailure:
    return JobFailure(reason, _MESSAGES[reason], summary, cause)


def _listed(indexes: list[int]) -> str:
    return ",".join(map(str, indexes))


def earliest(times: list[str | None]) -> dt.datetime | None:
    """The earliest of some RFC 3339 times (None when there is none)."""
    parsed = [t for t in (parse_time(x) for x in times) if t is not None]
    return min(parsed) if parsed else None
