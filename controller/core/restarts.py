"""Count every failure of a pod exactly once, whatever happens between passes.

A restart is counted when a pass first sees it: a container restarted in
place (its ``restartCount`` rose) or a pod failed (it will be recreated, or it
counts against its Job's backoffLimit). Counting from "what the pods say now"
alone is wrong twice over: a failed pod whose DELETE failed is still there on
the next pass and would be counted again, and a failed pod that someone else
deleted (the pod garbage collector, a user) takes its failure with it.

So, like the Job controller's ``uncountedTerminatedPods``, the job's status
keeps per pod uid how many failures of that pod are already in its totals, and
a pass counts only what is above that mark. The mark is written with the new
totals in one status write, before anything is deleted; pods that are gone
drop out of it, so it stays as small as the set of pods that ever failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Tally:
    """What one pass adds: new failures per pod uid, and the bookkeeping to write back."""

    new: dict[str, int]
    counted: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.new.values())


def tally(counted: Mapping[str, int] | None, failures: Mapping[str, int]) -> Tally:
    """Compare each pod's failures now (``failures``: uid -> count) with what was counted before.

    ``counted`` is None for a job whose status predates this bookkeeping: its current failures are
    taken as already counted (a restart in that very pass may be missed, none is counted twice).
    """
    if counted is None:
        return Tally({}, {uid: n for uid, n in failures.items() if n > 0})
    new = {uid: n - counted.get(uid, 0) for uid, n in failures.items() if n > counted.get(uid, 0)}
    marks = {uid: max(n, counted.get(uid, 0)) for uid, n in failures.items()}
    return Tally(new, {uid: n for uid, n in marks.items() if n > 0})
