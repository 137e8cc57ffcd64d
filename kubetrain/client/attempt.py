"""One attempt of a training run, from start to result: the part Airflow, KFP and the CLI share.

Each of them runs an attempt the same way: prepare it (the lineage's decision: reattach to, resume
or submit the attempt that should run now), wait for it with a status line now and then, read what
it reported, and fail with the job's reason when it failed. What they show differs -- a task log and
XComs, a step's log and outputs, a terminal -- so this module decides and reads, and leaves the
showing to them:

- ``prepare``: the lineage's decision, acted on (``lineage.prepare``).
- ``Deadline`` (pure): when a wait gives up. A timeout may count from Kueue's admission, so the time a
  job spends queued for quota is not held against it.
- ``follow``: the job's changes as ``Seen`` events -- changed, a status line due, finished, timed out.
- ``status``: what to tell the user about a job now: its status line (with Kueue's reason while it is
  queued) and why its pods are not scheduled.
- ``Result`` (pure): what a finished attempt reports: state, attempt, last checkpoint, metrics, report.
- ``finish``: the result, or ``JobFailedError`` with the reason and log tail of a failed attempt;
  ``mark_delivered`` notes that the caller returned the result (``lineage.Request.rerun_succeeded``).
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kubetrain import naming
from kubetrain.client import kinds, lineage
from kubetrain.client.errors import JobError, JobNotFoundError

if TYPE_CHECKING:
    from kubetrain.client.sync import JobClient

Obj = dict[str, Any]


def prepare(
    client: JobClient,
    request: lineage.Request,
    *,
    log: Callable[[str], None],
    pod_wait: float = lineage.POD_WAIT_SECONDS,
    include: Sequence[Obj] = (),
) -> lineage.Prepared:
    """Reattach to, resume or submit the attempt of ``request``'s lineage that should run now; ``log``
    gets the decision in words (and a status line now and then while earlier pods are ending)."""
    return client.prepare_attempt(request, log=log, pod_wait=pod_wait, include=include)


# -- waiting: the decisions -------------------------------------------------------------------------
@dataclass(frozen=True)
class Deadline:
    """When a wait gives up: ``timeout`` seconds after it started or, ``from_admission``, after Kueue
    last held the job queued; ``at`` (monotonic seconds) is None when the wait has no end."""

    timeout: float | None = None
    from_admission: bool = False
    at: float | None = None

    @classmethod
    def start(cls, timeout: float | None, *, from_admission: bool = False, now: float) -> Deadline:
        return cls(timeout, from_admission, None if timeout is None else now + timeout)

    def seen(self, job: Obj, now: float) -> Deadline:
        """The deadline once ``job`` was seen at ``now``: its clock starts again while Kueue holds the
        job queued, when it counts from admission."""
        if self.at is None or self.timeout is None or not self.from_admission:
            return self
        return replace(self, at=now + self.timeout) if kinds.queued_line(job) is not None else self

    def passed(self, now: float) -> bool:
        return self.at is not None and now >= self.at

    def window(self, every: float | None, now: float) -> float | None:
        """How long to watch before looking again: ``every``, cut short by the deadline (None: no end)."""
        if self.at is None:
            return every
        left = self.at - now
        return left if every is None else min(every, left)


class Event(enum.Enum):
    CHANGED = "changed"  # the job as it is now (the first look) or as it changed
    DUE = "due"  # a window passed without the job finishing: time for a status line
    FINISHED = "finished"  # it succeeded or failed: the last event
    TIMED_OUT = "timed out"  # the deadline passed first: the last event


@dataclass(frozen=True)
class Seen:
    """One event of a wait, with the job as last seen."""

    job: Obj
    event: Event

    @property
    def finished(self) -> bool:
        return self.event is Event.FINISHED


# -- waiting: the I/O -------------------------------------------------------------------------------
def follow(
    client: JobClient,
    kind: str,
    name: str,
    namespace: str,
    *,
    last_seen: Obj | None = None,
    every: float | None = None,
    timeout: float | None = None,
    timeout_from_admission: bool = False,
) -> Iterator[Seen]:
    """The job's changes until it finishes or ``timeout`` passes, with a ``DUE`` event every ``every``
    seconds it did not finish (``every`` None: none before the timeout). The job is always looked at
    once, however short the timeout; ``last_seen`` is the job as the caller last saw it."""
    deadline = Deadline.start(timeout, from_admission=timeout_from_admission, now=time.monotonic())
    latest, looked = last_seen, False
    while True:
        if latest is not None:
            deadline = deadline.seen(latest, time.monotonic())
        if looked and latest is not None and deadline.passed(time.monotonic()):
            yield Seen(latest, Event.TIMED_OUT)
            return
        for current in client.watch(kind, name, namespace, timeout=deadline.window(every, time.monotonic())):
            latest = current
            if kinds.is_finished(current):
                yield Seen(current, Event.FINISHED)
                return
            yield Seen(current, Event.CHANGED)
        if latest is None:  # a watch always starts with the job as it is: it was not there
            raise JobNotFoundError(f"{kind} {namespace}/{name} disappeared")
        looked = True
        yield Seen(latest, Event.DUE)


@dataclass(frozen=True)
class Status:
    """What to tell the user about a job now."""

    line: str  # kinds.status_line, with Kueue's reason while it holds the job queued
    unscheduled: tuple[str, ...] = ()  # ``pod: reason: message`` of each pod that is not scheduled


def status(client: JobClient, job: Obj, *, pods: bool = True) -> Status:
    """The job's status line and, with ``pods``, why its pending pods are not scheduled."""
    line = kinds.status_line(job, waiting=client.admission_wait(job))
    return Status(line, tuple(client.pending_reasons(job)) if pods else ())


# -- the result -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    """What a finished attempt reports (rank 0's training report, copied into the job)."""

    kind: str
    name: str
    namespace: str
    uid: str | None
    state: str
    attempt: int
    last_checkpoint: str | None  # where the last checkpoint is, when one was reported
    metrics: dict[str, Any]
    report: Obj

    @classmethod
    def of(cls, job: Obj) -> Result:
        meta = job["metadata"]
        report = kinds.report(job)
        return cls(
            kind=job["kind"],
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta.get("uid"),
            state=kinds.state(job),
            attempt=lineage.attempt_of(job),
            last_checkpoint=(meta.get("annotations") or {}).get(naming.ANNOTATION_LAST_CHECKPOINT)
            or report.get("last_checkpoint"),
            metrics=report.get("metrics") or {},
            report=report,
        )

    def numbers(self) -> dict[str, float]:
        """The metrics that are numbers (a metric that was not a finite number reads as None)."""
        return {k: float(v) for k, v in self.metrics.items() if isinstance(v, int | float)}


def finish(client: JobClient, job: Obj) -> Result:
    """The result of a finished attempt; ``JobFailedError`` when it failed, with its reason and the last
    lines of the replica that failed first (else rank 0's)."""
    client.check(job)
    return Result.of(job)


def mark_delivered(client: JobClient, job: Obj) -> None:
    """Note on the job that its caller returned its result, so the caller's next run of the same
    request knows it was run again on purpose (train again), not retried after it was lost (return the
    result). A job that is gone already (a TTL) needs no note: the next run starts afresh anyway."""
    meta = job["metadata"]
    with contextlib.suppress(JobError):
        client.annotate(
            job["kind"], meta["name"], meta["namespace"], {naming.ANNOTATION_RESULT_DELIVERED: "true"}
        )
