"""How a training operator waits for its job: in the worker, or deferred to the triggerer.

In the worker, the wait is ``kubetrain.client.attempt.follow`` (the same as the KFP launchers' and the
CLI's) with a status line in the task log every ``status_interval`` seconds and when the job ends,
why its pods are not scheduled while it is pending, and rank 0's log streamed from a thread.
Deferred, ``JobTrigger`` waits in the triggerer until the task's ``execution_timeout``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kubetrain.client import JobClient, attempt, kinds
from kubetrain.operators.compat import AirflowException
from kubetrain.operators.triggers import JobTrigger

if TYPE_CHECKING:
    from kubetrain.operators.compat import BaseOperator as _Operator
else:
    _Operator = object

Obj = dict[str, Any]


class WaitingMixin(_Operator):
    """The waiting of ``TrainingJobOperator`` (which sets these attributes)."""

    _client: JobClient
    _killed: bool
    kubernetes_conn_id: str
    get_logs: bool
    status_interval: float
    on_kill_action: str

    def _wait_in_worker(self, ref: dict[str, str]) -> Obj:
        """The job once it finished, with a status line every ``status_interval`` seconds and rank 0's
        log in the task log meanwhile."""
        with self._logs_streamed(ref):
            changes = attempt.follow(
                self._client, ref["kind"], ref["name"], ref["namespace"], every=self.status_interval
            )
            for seen in changes:
                if seen.event is attempt.Event.CHANGED and not self._killed:
                    continue
                self._log_status(seen.job)
                if self._killed:
                    raise AirflowException(
                        f"the task was killed; the job was handled per on_kill_action ({self.on_kill_action})"
                    )
                if seen.finished:
                    return seen.job
        raise AssertionError("a wait without a timeout ends when the job finished")

    def _log_status(self, job: Obj) -> None:
        """The job's status line, and why its pending pods are not scheduled."""
        status = attempt.status(self._client, job, pods=kinds.state(job) == "Pending")
        self.log.info("%s", status.line)
        for reason in status.unscheduled:
            self.log.warning("pod not scheduled: %s", reason)

    @contextlib.contextmanager
    def _logs_streamed(self, ref: dict[str, str]) -> Iterator[None]:
        """With ``get_logs``: rank 0's log goes to the task log, from a thread, while inside."""
        if not self.get_logs:
            yield
            return
        job = self._client.require(ref["kind"], ref["name"], ref["namespace"])
        stop = threading.Event()
        follower = threading.Thread(target=self._stream_logs, args=(job, stop), daemon=True)
        follower.start()
        try:
            yield
        finally:
            stop.set()
            follower.join(5)

    def _stream_logs(self, job: Obj, stop: threading.Event) -> None:
        try:
            for line in self._client.follow_logs(job):
                self.log.info("[%s] %s", _rank0_name(job), line)
                if stop.is_set():
                    return
        except Exception as exc:  # logs are a convenience: never fail the task over them
            self.log.warning("stopped streaming logs: %s", exc)

    def _defer(self, ref: dict[str, str], context: Any) -> None:
        deadline = None
        timeout = None
        if self.execution_timeout:
            started = context["ti"].start_date or dt.datetime.now(dt.UTC)
            deadline = (started + self.execution_timeout).timestamp()
            timeout = max(dt.timedelta(seconds=1), dt.timedelta(seconds=deadline - time.time()))
        self.defer(
            trigger=JobTrigger(
                kind=ref["kind"],
                name=ref["name"],
                namespace=ref["namespace"],
                kubernetes_conn_id=self.kubernetes_conn_id,  # the triggerer reads the connection itself
                uid=ref.get("uid") or None,
                deadline=deadline,
                status_interval=self.status_interval,
                on_kill_action=self.on_kill_action,
                get_logs=self.get_logs,
            ),
            method_name="execute_complete",
            timeout=timeout,
        )


def _rank0_name(job: Obj) -> str:
    return f"{job['metadata']['name']} rank 0"
