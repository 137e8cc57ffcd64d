"""Why a job failed: the first replica that failed, and what kind of failure it was.

A 16-rank job that fails leaves 16 failed pods, and all but one of them failed
because another did: a rank that runs out of GPU memory takes its peers down
with NCCL timeouts a minute later. The replica that matters is the one whose
container ended first, so that is the one named, with its exit code, the
kubelet's reason, a category, and the last lines it wrote.

Those lines come from the container's termination message: the controller sets
``terminationMessagePolicy: FallbackToLogsOnError`` on containers that do not
set a policy (``controller.plugins.logtail``), so the kubelet copies the tail of
the log of a container that failed without writing a message; rank 0's
``kubetrain.checkpoint`` report carries the exception the script died of. The
controller never reads logs itself.

Pure functions over the pods the caches hold (unit-tested on pods as the
kubelet leaves them); the categories are documented in docs/job-lifecycle.md.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubetrain import naming
from kubetrain.client.kinds import failed_replica
from kubetrain.controller.redaction import redact

Obj = dict[str, Any]

LOG_TAIL_LINES = 20  # lines of the failed container's output kept in status.firstFailure
MAX_LOG_TAIL = 2048  # bytes, as much as the kubelet keeps of a log as a termination message

OOM_KILLED = "OOMKilled"
GPU_OUT_OF_MEMORY = "GPUOutOfMemory"
COMMUNICATION = "CommunicationFailure"  # NCCL or gloo: a collective timed out or a peer went away
CUDA_ERROR = "CUDAError"
PYTHON_EXCEPTION = "PythonException"
SIGNALLED = "Signalled"
EXIT_CODE = "ExitCode"
IMAGE_PULL = "ImagePull"
UNSCHEDULABLE = "Unschedulable"
DISRUPTED = "Disrupted"
EVICTED = "Evicted"

# Ordered: the first category whose pattern the text matches wins (a CUDA OOM is also a Python exception).
_TEXT_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (GPU_OUT_OF_MEMORY, re.compile(r"CUDA out of memory|OutOfMemoryError: CUDA|cudaErrorMemoryAllocation")),
    (
        COMMUNICATION,
        re.compile(
            r"NCCL (?:error|WARN|timeout)|ncclSystemError|ncclInternalError|ncclRemoteError"
            r"|Watchdog caught collective operation timeout|DistNetworkError|DistBackendError"
            r"|Connection reset by peer|Connection closed by peer|\[gloo\].*(?:[Tt]imed out|Connection)"
            r"|ProcessGroupGloo.*[Tt]imed out|RendezvousTimeoutError|RendezvousClosedError"
        ),
    ),
    (CUDA_ERROR, re.compile(r"CUDA error|cudaError|CUBLAS_STATUS_|CUDNN_STATUS_|device-side assert")),
)
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Fault)\w*)(?::\s*(.*))?$"
)
_IMAGE_PULL_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}


@dataclass(frozen=True)
class FirstFailure:
    """The replica whose failure came first, and what it says."""

    replica_type: str
    index: int
    pod: str
    node: str
    time: str | None  # when its container ended (RFC 3339); None for a pod that never ran
    exit_code: int | None
    reason: str  # the kubelet's (Error, OOMKilled, ImagePullBackOff, Unschedulable...)
    category: str
    summary: str
    log_tail: str

    def describe(self) -> str:
        """One sentence for a Failed condition's message."""
        code = f"exit code {self.exit_code}, " if self.exit_code is not None else ""
        return f"first failure: {failed_replica(self.as_status())}: {code}{self.category}: {self.summary}"

    def as_status(self) -> Obj:
        """``status.firstFailure``."""
        fields = {
            "replicaType": self.replica_type,
            "index": self.index,
            "pod": self.pod,
            "node": self.node or None,
            "time": self.time,
            "exitCode": self.exit_code,
            "reason": self.reason,
            "category": self.category,
            "summary": self.summary,
            "logTail": self.log_tail or None,
        }
        return {k: v for k, v in fields.items() if v is not None}


def first_failure(
    pods: Iterable[tuple[str, int, Obj]], *, containers: bool = True, log_tail: bool = True
) -> FirstFailure | None:
    """The diagnosis of the earliest failure among ``(replica type, index, pod)``.

    A container that ended with a non-zero code (now, or before an in-place restart) comes first, the
    earliest by its end time; else a pod the cluster stopped; else one that cannot pull its image or
    cannot be scheduled (a job failed by its deadline before anything ran). None when nothing failed.
    ``containers=False`` looks only at the pods (a deadline: a container that failed and was restarted
    is not why the job ran out of time). What a container said is redacted (``redaction``), and kept
    only as the summary line with ``log_tail=False`` (the job's ``kubetrain.dev/failure-log-tail``).
    """
    pods = list(pods)
    ended = [
        (terminated.get("finishedAt") or "", rtype, index, pod, terminated)
        for rtype, index, pod in pods
        for terminated in (_failed_runs(pod) if containers else ())
    ]
    if ended:
        _, rtype, index, pod, terminated = min(ended, key=lambda e: e[0])
        return _from_container(rtype, index, pod, terminated, log_tail=log_tail)
    for rtype, index, pod in pods:
        found = _pod_level(rtype, index, pod)
        if found is not None:
            return found
    return None


def wants_log_tail(annotations: dict[str, str]) -> bool:
    """Whether a job keeps the last lines of its first failed container (``kubetrain.dev/failure-log-tail``)."""
    return str(annotations.get(naming.ANNOTATION_FAILURE_LOG_TAIL, "true")).lower() != "false"


def classify(exit_code: int | None, reason: str, text: str) -> tuple[str, str]:
    """``(category, summary)`` of a container that ended with ``exit_code``, the kubelet's ``reason`` and
    ``text`` (its termination message: the log tail, or a ``kubetrain.checkpoint`` report)."""
    report = _report(text)
    if report is not None:
        text = "\n".join(str(report.get(k) or "") for k in ("error", "traceback"))
    if reason == OOM_KILLED:
        return OOM_KILLED, "the container exceeded its memory limit and the kernel killed it"
    for category, pattern in _TEXT_CATEGORIES:
        match = pattern.search(text)
        if match is not None:
            return category, _line_of(text, match.start())
    exception = _python_exception(text, report)
    if exception is not None:
        return PYTHON_EXCEPTION, exception
    if exit_code is not None and exit_code > 128:
        number = exit_code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return SIGNALLED, f"killed by {name}"
    return EXIT_CODE, f"exited with code {exit_code}" + (
        f" ({reason})" if reason and reason != "Error" else ""
    )


def _failed_runs(pod: Obj) -> Iterable[Obj]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in (status.get("state"), status.get("lastState")):
            terminated = (state or {}).get("terminated")
            if terminated and int(terminated.get("exitCode") or 0) != 0:
                yield terminated


def _from_container(rtype: str, index: int, pod: Obj, terminated: Obj, *, log_tail: bool) -> FirstFailure:
    code = int(terminated.get("exitCode") or 0)
    reason = str(terminated.get("reason") or "")
    text = redact(str(terminated.get("message") or ""))
    category, summary = classify(code, reason, text)
    report = _report(text)
    tail = str(report.get("traceback") or "") if report is not None else text
    return FirstFailure(
        rtype,
        index,
        pod["metadata"]["name"],
        str((pod.get("spec") or {}).get("nodeName") or ""),
        terminated.get("finishedAt"),
        code,
        reason,
        category,
        summary,
        _tail(tail) if log_tail else "",
    )


def _pod_level(rtype: str, index: int, pod: Obj) -> FirstFailure | None:
    """A failure of the pod rather than of its container: stopped, evicted, no image, nowhere to run."""
    status = pod.get("status") or {}

    def found(reason: str, category: str, summary: str) -> FirstFailure:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        return FirstFailure(
            rtype, index, pod["metadata"]["name"], node, None, None, reason, category, summary, ""
        )

    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = str(condition.get("reason") or "DisruptionTarget")
            return found(reason, DISRUPTED, str(condition.get("message") or reason))
    if status.get("reason") == EVICTED:
        return found(EVICTED, EVICTED, str(status.get("message") or "evicted by the kubelet"))
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _IMAGE_PULL_REASONS:
            message = str(waiting.get("message") or waiting["reason"])
            return found(str(waiting["reason"]), IMAGE_PULL, message)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == UNSCHEDULABLE:
            return found(UNSCHEDULABLE, UNSCHEDULABLE, str(condition.get("message") or UNSCHEDULABLE))
    return None


def _report(text: str) -> Obj | None:
    """A ``kubetrain.checkpoint`` report, when that is what the termination message holds."""
    if not text.startswith("{"):
        return None
    try:
        report = json.loads(text)
    except ValueError:
        return None
    return report if isinstance(report, dict) and "status" in report else None


def _python_exception(text: str, report: Obj | None) -> str | None:
    """``Type: message`` of the last exception in a traceback (or the one a report names)."""
    if report is not None and report.get("error"):
        return str(report["error"])
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    for line in reversed(text[at:].splitlines()):
        match = _EXCEPTION_LINE.match(line.strip())
        if match is not None:
            return line.strip()
    return None


def _line_of(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)].strip()[:300]


def _tail(text: str) -> str:
    lines = text.rstrip("\n").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines)[-MAX_LOG_TAIL:]
