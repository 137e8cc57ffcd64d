"""A deduplicating, rate-limited work queue of keys (client-go's workqueue, in asyncio).

The unit of work is a key (``namespace/name``), never an event: ten pod events
for one job collapse into one reconcile of that job. A key being processed is
never handed to a second worker; if it is added meanwhile, it is queued again
once the first worker is done, so the latest state is always reconciled.

Failed keys come back with per-key exponential backoff (5 ms doubling up to
1000 s), bounded overall by a token bucket, so one broken job cannot starve
the others and a broken API server is not hammered.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from kubetrain.kube import observer


class ShutDownError(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue:
    def __init__(
        self,
        name: str,
        *,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
        overall_qps: float = 10.0,
        overall_burst: int = 100,
    ) -> None:
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._added_at: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._overall_qps = overall_qps
        self._overall_tokens = float(overall_burst)
        self._overall_burst = overall_burst
        self._overall_stamp = time.monotonic()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        """Queue ``key`` unless it is already waiting."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._added_at.setdefault(key, time.monotonic())
        if key not in self._processing:
            self._queue.append(key)
            self._notify()
        observer.current().queued(self.name, len(self._queue))

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending add for the key wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._timers[key] = (due, loop.call_at(due, self._fire, key))

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: str) -> None:
        """Queue ``key`` again after its backoff: the key's own, or the overall one if longer."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        observer.current().queue_retried(self.name)
        self.add_after(key, max(self._item_delay(failures), self._overall_delay()))

    def _item_delay(self, failures: int) -> float:
        return min(self.base_delay * 2.0 ** min(failures, 40), self.max_delay)

    def _overall_delay(self) -> float:
        now = time.monotonic()
        self._overall_tokens = min(
            float(self._overall_burst), self._overall_tokens + (now - self._overall_stamp) * self._overall_qps
        )
        self._overall_stamp = now
        self._overall_tokens -= 1
        return 0.0 if self._overall_tokens >= 0 else -self._overall_tokens / self._overall_qps

    def forget(self, key: str) -> None:
        """The key succeeded: reset its backoff."""
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> str:
        """The next key to process; raises ``ShutDown`` once the queue is shut down and empty."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDownError
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            observer.current().queue_waited(self.name, time.monotonic() - added)
        observer.current().queue_changed(self.name, len(self._queue))
        return key

    def done(self, key: str) -> None:
        """A worker finished ``key``; if it was added meanwhile, queue it again."""
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._added_at.setdefault(key, time.monotonic())
            observer.current().queue_changed(self.name, len(self._queue))
            self._notify()

    def shut_down(self) -> None:
        self._shutting_down = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._notify()

    def _notify(self) -> None:
        """Wake one waiting worker per queued key (all of them on shutdown)."""
        wake = len(self._waiters) if self._shutting_down else len(self._queue)
        for waiter in list(self._waiters)[:wake]:
            if not waiter.done():
                waiter.set_result(None)
