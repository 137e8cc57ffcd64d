"""Expectations: remember the creates and deletes not yet seen in the cache.

Between a create call returning and the watch delivering the new pod, the
cache says the pod does not exist; a reconcile in that window would create it
again. So before writing, a reconciler raises the expectation for the job
("expect 3 pod adds"), the informer lowers it as each add or delete arrives,
and the job is not reconciled until its expectations are met. Entries expire
after ``ttl`` so a lost watch event delays a job but never wedges it.
(Deterministic child names make a duplicate create fail with 409 anyway; the
expectations spare the API server those calls and keep status computed from a
cache that has caught up.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Entry:
    adds: int = 0
    deletes: set[str] = field(default_factory=set)
    stamp: float = 0.0


class Expectations:
    def __init__(self, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    def expect_creations(self, key: str, count: int) -> None:
        entry = self._entries.setdefault(key, _Entry())
        entry.adds += count
        entry.stamp = self._clock()

    def expect_deletion(self, key: str, uid: str) -> None:
        entry = self._entries.setdefault(key, _Entry())
        entry.deletes.add(uid)
        entry.stamp = self._clock()

    def creation_observed(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.adds > 0:
            entry.adds -= 1

    def deletion_observed(self, key: str, uid: str) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            entry.deletes.discard(uid)

    def satisfied(self, key: str) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return True
        if (entry.adds <= 0 and not entry.deletes) or self._clock() - entry.stamp > self.ttl:
            del self._entries[key]
            return True
        return False

    def pending_for(self, key: str) -> float:
        """Seconds until the key's expectations expire (for a safety requeue)."""
        entry = self._entries.get(key)
        return 0.0 if entry is None else max(0.0, self.ttl - (self._clock() - entry.stamp))

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)
