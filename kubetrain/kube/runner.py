"""Run a reconcile function over a work queue with N workers.

The whole retry policy lives here (controller-runtime's ``reconcileHandler``):

* a reconcile that returns ``Result(requeue_after=s)`` succeeded and asks to be
  looked at again in ``s`` seconds (deadlines, TTLs, expectation expiry);
* one that raises ``RetryLaterError`` (waiting on something outside the controller,
  such as an earlier object of the same name being deleted), an API error, or a
  write refused because this replica may no longer lead (the process is about
  to exit) is logged as a warning and retried with rate-limited backoff;
* one that raises anything else is a bug: logged with its traceback, counted as
  a panic, and retried with rate-limited backoff.

A key is never reconciled by two workers at once (the queue guarantees it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kubetrain.kube import observer
from kubetrain.kube.client import WriteFencedError
from kubetrain.kube.errors import APIError
from kubetrain.kube.workqueue import ShutDownError, WorkQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: nothing, or another look after ``requeue_after`` seconds."""

    requeue_after: float | None = None

    @staticmethod
    def soonest(*results: Result) -> Result:
        delays = [r.requeue_after for r in results if r.requeue_after is not None]
        return Result(min(delays) if delays else None)


class RetryLaterError(Exception):
    """The reconcile cannot make progress yet for a reason outside the controller; try again later."""


Reconcile = Callable[[str], Awaitable[Result]]


class Runner:
    def __init__(self, name: str, queue: WorkQueue, reconcile: Reconcile, *, workers: int = 4) -> None:
        self.name = name
        self.queue = queue
        self.reconcile = reconcile
        self.workers = max(1, workers)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        observer.current().workers(self.name, self.workers)
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self.workers)
        ]

    async def stop(self, grace: float = 10.0) -> None:
        """Stop taking keys and let in-flight reconciles finish (up to ``grace`` seconds)."""
        self.queue.shut_down()
        _, pending = await asyncio.wait(self._tasks, timeout=grace) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDownError:
                return
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: str) -> None:
        observer.current().reconcile_started(self.name)
        started = time.monotonic()
        outcome = "error"
        try:
            result = await self.reconcile(key)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            unexpected = not _is_expected_error(exc)
            if unexpected:
                log.exception("reconcile %s %s raised", self.name, key)
                observer.current().reconcile_panicked(self.name)
            else:
                log.warning(
                    "reconcile %s %s: %s (retry %d)", self.name, key, exc, self.queue.failures(key) + 1
                )
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
            if result.requeue_after is not None:
                outcome = "requeue_after"
                self.queue.add_after(key, result.requeue_after)
            else:
                outcome = "success"
        finally:
            observer.current().reconciled(self.name, outcome, time.monotonic() - started)


def _is_expected_error(exc: Exception) -> bool:
    return isinstance(exc, APIError | RetryLaterError | WriteFencedError)
