"""What the status server takes before it answers 429: rate limits that refuse instead of queueing,
and a memory of the verdicts it gave (an allowed token for ``VERDICT_TTL``, a refused one for
``REFUSAL_TTL``).

Anyone who can reach the endpoint can send it requests, and an unknown token used to cost one
TokenReview each, with no limit, on the client the controller's own writes queue behind: enough
requests with random tokens starved every job's status writes. Now a request is weighed before it
costs the API server anything: a refusal is remembered for ``REFUSAL_TTL`` seconds per token and path
(the same wrong token asks nothing again), TokenReviews have a budget of their own for the whole
server, and each token (each pod) may report ``REPORTS_QPS`` times a second on average. A request
over a budget gets 429 with ``Retry-After``, as the API server answers its own clients; the training
side (``kubetrain.progress``) drops that report and sends the next one. Pure and clock-driven, so
tested without a server.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

REVIEWS_QPS, REVIEWS_BURST = 20.0, 40  # TokenReviews of the whole server (unknown tokens)
REPORTS_QPS, REPORTS_BURST = 1.0, 10  # reports of one token: kubetrain.progress reports every 5 s
VERDICT_TTL = 60.0  # seconds an allowed (token, path) is trusted without asking again, while its pod lives
REFUSAL_TTL = 30.0  # seconds a refused (token, path) is answered from memory
MAX_KEYS = 4096  # tokens and verdicts remembered at most (oldest forgotten first)


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class Limiter:
    """Token buckets per key, ``qps`` on average and ``burst`` at once, that refuse when empty."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float], max_keys: int = MAX_KEYS) -> None:
        self.qps, self.burst, self.clock, self.max_keys = qps, burst, clock, max_keys
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str = "") -> float | None:
        """Take one for ``key``: None when allowed, else the seconds until one is available."""
        now = self.clock()
        bucket = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.qps)
        bucket.stamp = now
        self._buckets[key] = bucket  # most recently used last
        if len(self._buckets) > self.max_keys:
            del self._buckets[next(iter(self._buckets))]
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return (1 - bucket.tokens) / self.qps


@dataclass(frozen=True)
class _Given:
    until: float
    status: int
    reason: str
    pod_uid: str | None  # the pod an allowed token is bound to


class Verdicts:
    """The answers given to (token, path) pairs, each for the seconds it was given for, at most
    ``max_keys`` of them (the oldest forgotten first). An answer that allowed a pod is forgotten as
    soon as that pod is deleted (``forget_pod``), so a deleted pod's token is asked about again."""

    def __init__(self, clock: Callable[[], float], max_keys: int = MAX_KEYS) -> None:
        self.clock, self.max_keys = clock, max_keys
        self._given: dict[tuple[str, str], _Given] = {}

    def get(self, key: tuple[str, str]) -> tuple[int, str] | None:
        found = self._given.get(key)
        if found is None or found.until <= self.clock():
            self._given.pop(key, None)
            return None
        return found.status, found.reason

    def remember(
        self, key: tuple[str, str], status: int, reason: str, *, ttl: float, pod_uid: str | None = None
    ) -> None:
        self._given.pop(key, None)  # most recently given last
        self._given[key] = _Given(self.clock() + ttl, status, reason, pod_uid)
        if len(self._given) > self.max_keys:
            del self._given[next(iter(self._given))]

    def forget_pod(self, uid: str) -> None:
        """Forget every answer given to a token of pod ``uid`` (it was deleted)."""
        for key in [key for key, given in self._given.items() if given.pod_uid == uid]:
            del self._given[key]


def retry_after(seconds: float) -> str:
    """The ``Retry-After`` header's value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
