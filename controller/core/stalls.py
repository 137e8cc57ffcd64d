"""Stall detection: a job whose ranks all run but none reports progress any more.

A rank that hangs (a deadlocked collective, a stuck data loader, a GPU that
stopped answering) keeps its pod Running and its job Running: no failure ever
comes, and the job holds its GPUs until its deadline, if it has one. A job that
sets ``kubetrain.dev/stall-timeout-seconds`` and reports progress
(``kubetrain.progress``, or the ``kubeflow`` SDK's ``update_trainjob_status``)
is restarted when no report has come for that long while every replica's
container runs; the restart counts like any other, and after
``kubetrain.dev/max-stalls`` of them (default 3) the job fails with reason
``Stalled``.

The clock starts at the newest of: the last report, the latest start of a
replica's container (a restarted pod has just started), and the last restart for
a stall. Pure functions over the job and its pods; the rules are in
docs/job-lifecycle.md.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass

from kubetrain import naming
from kubetrain.api.objects import Obj
from kubetrain.controller.core.skeleton import parse_time, rfc3339

STALLED = "Stalled"


@dataclass(frozen=True)
class Stall:
    """A stall found: since when nothing was reported, and the last step reported."""

    since: dt.datetime
    seconds: float
    last_step: str | None


@dataclass(frozen=True)
class StallPolicy:
    timeout: float
    max_stalls: int

    @classmethod
    def of(cls, job: Obj) -> StallPolicy | None:
        """The job's policy, or None when it sets no (valid) stall timeout."""
        annotations = job.get("metadata", {}).get("annotations") or {}
        try:
            timeout = float(annotations[naming.ANNOTATION_STALL_TIMEOUT])
        except (KeyError, ValueError):
            return None
        if timeout <= 0:
            return None
        try:
            max_stalls = int(annotations.get(naming.ANNOTATION_MAX_STALLS, naming.DEFAULT_MAX_STALLS))
        except ValueError:
            max_stalls = naming.DEFAULT_MAX_STALLS
        return cls(timeout, max(max_stalls, 0))


def last_report(job: Obj) -> tuple[dt.datetime | None, str | None]:
    """When the job's last progress report was made, and its step (v1: the annotation; TrainJob: status)."""
    report = (job.get("status") or {}).get("trainerStatus")
    if report is None:
        text = (job.get("metadata", {}).get("annotations") or {}).get(naming.ANNOTATION_TRAINER_STATUS)
        try:
            report = json.loads(text) if text else None
        except ValueError:
            report = None
    if not isinstance(report, dict):
        return None, None
    step = next(
        (str(m.get("value")) for m in report.get("metrics") or [] if m.get("name") == "currentStep"), None
    )
    return parse_time(report.get("lastUpdatedTime")), step


def running_since(pods: Iterable[Obj]) -> dt.datetime | None:
    """When the last of the pods' containers started, if every one of them is running; else None."""
    latest: dt.datetime | None = None
    count = 0
    for pod in pods:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if not statuses:
            return None  # not started yet
        for status in statuses:
            started = parse_time(((status.get("state") or {}).get("running") or {}).get("startedAt"))
            if started is None:
                return None
            count += 1
            latest = started if latest is None else max(latest, started)
    return latest if count else None


def left_behind(pods: Iterable[Obj], status: Obj) -> list[Obj]:
    """The pods a stall restart was to delete and did not (their delete failed): created before the
    ``lastStallTime`` the restart wrote first. Their replacements are created after it (timestamps have
    whole seconds, but a stalled pod is at least the stall timeout older than the stall)."""
    restarted = parse_time(status.get("lastStallTime"))
    if restarted is None:
        return []
    return [
        pod
        for pod in pods
        if (created := parse_time(pod.get("metadata", {}).get("creationTimestamp"))) is not None
        and created < restarted
    ]


def check(
    policy: StallPolicy, job: Obj, pods: Iterable[Obj], now: dt.datetime
) -> tuple[Stall | None, float | None]:
    """A stall, or None and how many seconds until there could be one (None: not while pods start)."""
    started = running_since(pods)
    if started is None:
        return None, None
    reported, step = last_report(job)
    restarted = parse_time((job.get("status") or {}).get("lastStallTime"))
    since = max(t for t in (started, reported, restarted) if t is not None)
    quiet = (now - since).total_seconds()
    if quiet < policy.timeout:
        return None, policy.timeout - quiet
    return Stall(since, quiet, step), None


def record(status: Obj, stall: Stall, policy: StallPolicy, job: str, stamp: str) -> tuple[str, bool]:
    """Count the stall in ``status`` (``stalls``, ``lastStallTime``); the message for the Event or the
    Failed condition of ``job`` (e.g. "PyTorchJob mnist"), and whether the job fails for it."""
    count = int(status.get("stalls") or 0) + 1
    status["stalls"], status["lastStallTime"] = count, stamp
    message = (
        f"{job} reported no progress for {stall.seconds:.0f}s (since {rfc3339(stall.since)}, last step "
        f"{stall.last_step or 'unknown'})"
    )
    if count > policy.max_stalls:
        return (
            f"{message}; it stalled {count} times, {naming.ANNOTATION_MAX_STALLS} is {policy.max_stalls}",
            True,
        )
    return f"{message}; restarting its pods ({count} of {policy.max_stalls})", False
