"""Job conditions, with the current state always last: one set of rules for every kind.

Upstream appends a changed condition at the end, and ``kubectl get`` shows the
type of the last condition as the job's State, whatever its status, so a
resumed job showed ``Suspended``. Here every write also moves False conditions
before True ones, so the last condition is always a True one and the State
column is always right. Otherwise the rules are upstream's:

* a terminal condition that is True ends all bookkeeping: no further changes;
* the same type with the same status and reason is left alone (timestamps too);
* Running and Restarting replace each other;
* finishing (success or Failed) turns the conditions a finished job can no
  longer be in False (Running, Restarting, and ReplicaFailure: a finished v1
  job creates nothing more).

What differs between the kinds is a ``Conditions`` value: the type that says a
job succeeded (``Succeeded`` for the v1 kinds, ``Complete`` for a TrainJob),
which True conditions are terminal, and whether conditions carry upstream v1's
``lastUpdateTime`` (a TrainJob's are ``metav1.Condition``, which has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
DEADLINE_EXCEEDED = "DeadlineExceeded"  # the reason of a job failed by its activeDeadlineSeconds (both APIs)
REPLICA_FAILURE = "ReplicaFailure"  # pods cannot be created (as ReplicaSets say it), while retrying
DELETION_HELD = "DeletionHeld"  # a finished TrainJob's TTL passed, but deleting it would delete its output

Condition = dict[str, Any]
Status = dict[str, Any]


def find(status: Status, ctype: str) -> Condition | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == ctype:
            return dict(condition)
    return None


def is_true(status: Status, ctype: str) -> bool:
    condition = find(status, ctype)
    return condition is not None and condition.get("status") == "True"


def remove(status: Status, ctype: str) -> bool:
    """Drop a condition; returns whether it was there."""
    conditions = status.get("conditions") or []
    kept = [c for c in conditions if c.get("type") != ctype]
    if len(kept) == len(conditions):
        return False
    status["conditions"] = kept
    return True


def note_on_finished(status: Status, ctype: str, *, reason: str, message: str, now: str) -> bool:
    """Record a True condition on a finished job without changing how it reads as finished: it goes
    just before the last (terminal) condition, so the State column still says how the job ended.
    Returns whether anything changed."""
    conditions: list[Condition] = list(status.get("conditions") or [])
    existing = find(status, ctype)
    if existing is not None and existing.get("status") == "True" and existing.get("reason") == reason:
        return False
    new: Condition = {
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    kept = [c for c in conditions if c.get("type") != ctype]
    status["conditions"] = [*kept[:-1], new, *kept[-1:]]
    return True


def state(status: Status) -> str:
    """What ``kubectl get`` shows: the type of the last condition."""
    conditions = status.get("conditions") or []
    return str(conditions[-1]["type"]) if conditions else ""


@dataclass(frozen=True)
class Conditions:
    """The condition rules of one kind of job."""

    success: str  # the condition type of a job that succeeded
    terminal: tuple[str, ...]  # True, any of these ends all changes
    update_time: bool  # conditions carry lastUpdateTime (Kubeflow v1's JobCondition)
    false_on_finish: tuple[str, ...] = (RUNNING, RESTARTING, REPLICA_FAILURE)

    def is_finished(self, status: Status) -> bool:
        return is_true(status, self.success) or is_true(status, FAILED)

    def set(
        self, status: Status, ctype: str, *, reason: str, message: str, now: str, true: bool = True
    ) -> bool:
        """Record a condition; returns whether anything changed."""
        if any(is_true(status, terminal) for terminal in self.terminal):
            return False
        conditions: list[Condition] = list(status.get("conditions") or [])
        value = "True" if true else "False"
        existing = next((c for c in conditions if c.get("type") == ctype), None)
        if existing is not None and existing.get("status") == value and existing.get("reason") == reason:
            return False
        transition = (
            existing["lastTransitionTime"]
            if existing is not None and existing.get("status") == value and existing.get("lastTransitionTime")
            else now
        )
        new: Condition = {"type": ctype, "status": value, "reason": reason, "message": message}
        if self.update_time:
            new["lastUpdateTime"] = now
        new["lastTransitionTime"] = transition
        kept = [c for c in conditions if c.get("type") != ctype]
        if true and ctype in (RUNNING, RESTARTING):
            other = RESTARTING if ctype == RUNNING else RUNNING
            kept = [c for c in kept if c.get("type") != other]
        if true and ctype in (self.success, FAILED):
            kept = [self._falsified(c, now) if c.get("type") in self.false_on_finish else c for c in kept]
        kept.append(new)
        status["conditions"] = [c for c in kept if c.get("status") != "True"] + [
            c for c in kept if c.get("status") == "True"
        ]
        return True

    def set_false(self, status: Status, ctype: str, *, reason: str, message: str, now: str) -> bool:
        """Turn an existing condition False (a condition never seen stays absent)."""
        if find(status, ctype) is None:
            return False
        return self.set(status, ctype, reason=reason, message=message, now=now, true=False)

    def _falsified(self, condition: Condition, now: str) -> Condition:
        if condition.get("status") == "False":
            return condition
        changed = {**condition, "status": "False", "lastTransitionTime": now}
        if self.update_time:
            changed["lastUpdateTime"] = now
        return changed


V1 = Conditions(success=SUCCEEDED, terminal=(FAILED,), update_time=True)
TRAINJOB = Conditions(success=COMPLETE, terminal=(COMPLETE, FAILED), update_time=False, false_on_finish=())
