"""Progress reports from training code: step, percentage, ETA and metrics, live on the job.

The training side of docs/observability.md. Like ``kubetrain.checkpoint`` it needs no
Kubernetes and no kubetrain package beyond this file's standard library: the controller
gives every trainer container the Kubeflow Trainer status-server contract in its
environment (``KUBEFLOW_TRAINER_SERVER_URL``, ``KUBEFLOW_TRAINER_SERVER_TOKEN``,
``KUBEFLOW_TRAINER_SERVER_CA_CERT``), and a report is an HTTPS POST of
``{"trainerStatus": {...}}`` there with the pod's projected token, exactly what the
``kubeflow`` SDK's ``update_trainjob_status`` sends, so either works against kubetrain
and against Kubeflow Trainer.

``report_progress`` is meant to be called every step. It only records the latest report
and wakes a background thread; that thread sends the newest report at most once per
``MIN_INTERVAL_SECONDS`` (Kubeflow's client-side limit), so the training loop never waits
on the network, and a failed send is logged, never raised. At exit the last report is
sent, so the job ends showing its final step. Outside a job (no server URL in the
environment) a report does nothing. Only rank 0 sends: every rank reporting the same
step would multiply the writes by the world size.

The standard library's ``urllib`` is the transport because a training image may lack
``requests``; it is one POST per five seconds.

    for step in range(start, steps):
        loss = train_step()
        report_progress(step + 1, total=steps, metrics={"loss": loss})
"""

from __future__ import annotations

import atexit
import datetime as dt
import functools
import json
import logging
import math
import os
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming
from kubetrain.checkpoint import current_rank

log = logging.getLogger(__name__)

MIN_INTERVAL_SECONDS = 5.0  # at most one send per this many seconds
SEND_TIMEOUT_SECONDS = 5.0  # a send that takes longer is given up (the next report tries again)
MAX_METRICS = 256  # the CRD's limits on status.trainerStatus.metrics
MAX_TEXT = 64
STEP_METRIC = "currentStep"  # the step and total travel as metrics (trainerStatus has no field for them)
TOTAL_METRIC = "totalSteps"


@dataclass(frozen=True)
class Report:
    """One call of ``report``: what the training code said, and when (monotonic and wall clock)."""

    step: int
    total: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    eta_seconds: float | None = None
    at: float = 0.0
    wall: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


def progress_percentage(step: int, total: int | None) -> int | None:
    """Whole percent done (0..100), or None without a total."""
    if not total or total <= 0:
        return None
    return max(0, min(100, math.floor(100 * step / total)))


def estimate_remaining(first: Report, latest: Report) -> int | None:
    """Seconds left at the pace since ``first``: None without a total or before any step was timed."""
    if latest.eta_seconds is not None:
        return max(0, round(latest.eta_seconds))
    if not latest.total or latest.step <= first.step or latest.at <= first.at:
        return None
    per_step = (latest.at - first.at) / (latest.step - first.step)
    return max(0, round((latest.total - latest.step) * per_step))


def metric_text(value: Any) -> str:
    """A metric value as the CRD takes it: a string of at most 64 characters (floats to 6 digits)."""
    item = getattr(value, "item", None)  # a 0-d tensor or numpy scalar
    if callable(item):
        value = item()
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return text[:MAX_TEXT]


def trainer_status(first: Report, latest: Report) -> dict[str, Any]:
    """The ``trainerStatus`` object of a report, in Kubeflow Trainer's field names."""
    status: dict[str, Any] = {"lastUpdatedTime": latest.wall.strftime("%Y-%m-%dT%H:%M:%SZ")}
    percent = progress_percentage(latest.step, latest.total)
    if percent is not None:
        status["progressPercentage"] = percent
    eta = estimate_remaining(first, latest)
    if eta is not None:
        status["estimatedRemainingSeconds"] = eta
    metrics = {STEP_METRIC: latest.step}
    if latest.total is not None:
        metrics[TOTAL_METRIC] = latest.total
    named = {**metrics, **latest.metrics}
    status["metrics"] = [
        {"name": str(name)[:MAX_TEXT], "value": metric_text(value)}
        for name, value in list(named.items())[:MAX_METRICS]
    ]
    return status


@functools.lru_cache(maxsize=4)
def _tls_context(ca_file: str) -> ssl.SSLContext:
    """One context per CA file: loading the CA is the costly part of a send."""
    return ssl.create_default_context(cafile=ca_file)


@dataclass(frozen=True)
class Server:
    """Where reports go: the status server's URL, the token file and the CA that signs the server."""

    url: str
    token_file: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Server | None:
        url = environ.get(naming.ENV_TRAINER_SERVER_URL)
        if not url:
            return None
        return cls(
            url,
            environ.get(naming.ENV_TRAINER_SERVER_TOKEN),
            environ.get(naming.ENV_TRAINER_SERVER_CA_CERT),
        )

    def post(self, status: dict[str, Any], timeout: float = SEND_TIMEOUT_SECONDS) -> None:
        """POST one ``trainerStatus``; raises on a transport error or an answer other than 200."""
        headers = {"Content-Type": "application/json"}
        if self.token_file:
            with open(self.token_file) as token:  # read each time: the kubelet rotates it
                headers["Authorization"] = f"Bearer {token.read().strip()}"
        body = json.dumps({"trainerStatus": status}).encode()
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        context = _tls_context(self.ca_file) if self.ca_file else None
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            if answer.status != 200:
                raise OSError(f"status server answered {answer.status}")


_Pending = tuple[int, int | None, dict[str, Any] | None, float | None, float]  # report()'s arguments, at


class ProgressReporter:
    """Sends the newest report at most every ``interval`` seconds, from a thread of its own.

    ``send`` takes a ``trainerStatus`` and raises on failure (default: ``Server.post``).
    """

    def __init__(
        self,
        send: Callable[[dict[str, Any]], None] | None,
        *,
        interval: float = MIN_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        rank: Callable[[], int] = current_rank,
    ) -> None:
        self._send = send
        self._interval = interval
        self._clock = clock
        self._rank = rank
        self._lock = threading.Lock()
        self._sending = threading.Lock()  # one send at a time: the thread's or the final flush
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._first: _Pending | None = None
        self._pending: _Pending | None = None
        self._last_sent_at: float | None = None
        self._failing = False
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self._send is not None

    def report(
        self,
        step: int,
        total: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        eta_seconds: float | None = None,
    ) -> None:
        """Record the newest progress; it is sent within ``interval`` seconds. Never blocks on I/O."""
        if self._send is None:
            return
        # Only a tuple and a dict copy per call: a Report, timestamps and text are made when sending.
        pending = (step, total, dict(metrics) if metrics else None, eta_seconds, self._clock())
        with self._lock:
            self._pending = pending
            if self._first is None:
                self._first = pending
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kubetrain-progress", daemon=True)
                self._thread.start()
        if not self._wake.is_set():
            self._wake.set()

    def delay(self, now: float) -> float:
        """Seconds until the next send is allowed (0: now)."""
        if self._last_sent_at is None:
            return 0.0
        return max(0.0, self._last_sent_at + self._interval - now)

    def flush(self, timeout: float = SEND_TIMEOUT_SECONDS) -> bool:
        """Send the newest report now if it was not sent yet, and stop the thread; True when sent."""
        self._stop.set()
        self._wake.set()
        if not self._sending.acquire(timeout=timeout):
            return False  # a send in flight did not finish in time; give up rather than hold up exit
        try:
            return self._send_pending()
        finally:
            self._sending.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            wait = self.delay(self._clock())
            if wait and self._stop.wait(wait):
                return
            self._wake.clear()
            with self._sending:
                if not self._stop.is_set():
                    self._send_pending()

    def _report(self, pending: _Pending, now: float) -> Report:
        step, total, metrics, eta, at = pending
        wall = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=now - at)
        return Report(step, total, metrics or {}, eta, at, wall)

    def _send_pending(self) -> bool:
        with self._lock:
            pending, first, self._pending = self._pending, self._first, None
        if pending is None or first is None or self._send is None or self._rank() != 0:
            return False
        now = self._last_sent_at = self._clock()
        try:
            self._send(trainer_status(self._report(first, now), self._report(pending, now)))
        except Exception as exc:  # never into training code: the next report tries again
            log.log(logging.DEBUG if self._failing else logging.WARNING, "progress report failed: %s", exc)
            self._failing = True
            return False
        self._failing = False
        return True


@functools.cache
def default_reporter() -> ProgressReporter:
    """The process's reporter, made from the environment on first use; its last report is sent at exit."""
    server = Server.from_env()
    reporter = ProgressReporter(server.post if server else None)
    if reporter.enabled:
        atexit.register(reporter.flush)
    return reporter


def report_progress(
    step: int,
    total: int | None = None,
    metrics: Mapping[str, Any] | None = None,
    eta_seconds: float | None = None,
) -> None:
    """Report the training's progress: call it every step (cheap; sent at most every 5 seconds).

    ``total`` makes a percentage and, unless ``eta_seconds`` is given, an ETA at the pace so far;
    ``metrics`` (name to number or text) are shown beside them. Does nothing outside a job.
    """
    default_reporter().report(step, total, metrics, eta_seconds)
