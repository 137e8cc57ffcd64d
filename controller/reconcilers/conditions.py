"""Job conditions of the v1 kinds: upstream's bookkeeping, with the current state always last.

Upstream appends a changed condition at the end, and ``kubectl get`` shows the
type of the last condition as the job's State, whatever its status, so a
resumed job showed ``Suspended``. Here every write also moves False conditions
before True ones, so the last condition is always a True one and the State
column is always right: Created, Running, Restarting, Suspended, Succeeded or
Failed. Otherwise the rules are upstream's:

* a Failed=True job is terminal: no further condition changes;
* the same type with the same status and reason is left alone (timestamps too);
* Running and Restarting replace each other;
* finishing (Succeeded or Failed) turns Running and Restarting to False (and
  ReplicaFailure: a finished job creates nothing more).
"""

from __future__ import annotations

from typing import Any

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
REPLICA_FAILURE = "ReplicaFailure"  # pods cannot be created (as ReplicaSets say it), while retrying

Condition = dict[str, Any]


def find(status: dict[str, Any], ctype: str) -> Condition | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == ctype:
            return dict(condition)
    return None


def is_true(status: dict[str, Any], ctype: str) -> bool:
    condition = find(status, ctype)
    return condition is not None and condition.get("status") == "True"


def is_finished(status: dict[str, Any]) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def set_condition(
    status: dict[str, Any], ctype: str, *, reason: str, message: str, now: str, true: bool = True
) -> bool:
    """Record a condition; returns whether anything changed."""
    conditions: list[Condition] = list(status.get("conditions") or [])
    if is_true(status, FAILED):
        return False
    value = "True" if true else "False"
    existing = next((c for c in conditions if c.get("type") == ctype), None)
    if existing is not None and existing.get("status") == value and existing.get("reason") == reason:
        return False
    transition = (
        existing["lastTransitionTime"]
        if existing is not None and existing.get("status") == value and existing.get("lastTransitionTime")
        else now
    )
    new = {
        "type": ctype,
        "status": value,
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": transition,
    }
    kept = [c for c in conditions if c.get("type") != ctype]
    if true and ctype == RESTARTING:
        kept = [c for c in kept if c.get("type") != RUNNING]
    if true and ctype == RUNNING:
        kept = [c for c in kept if c.get("type") != RESTARTING]
    if true and ctype in (SUCCEEDED, FAILED):
        kept = [
            _falsified(c, now) if c.get("type") in (RUNNING, RESTARTING, REPLICA_FAILURE) else c for c in kept
        ]
    kept.append(new)
    status["conditions"] = [c for c in kept if c.get("status") != "True"] + [
        c for c in kept if c.get("status") == "True"
    ]
    return True


def set_false(status: dict[str, Any], ctype: str, *, reason: str, message: str, now: str) -> bool:
    """Turn an existing condition False (a condition never seen stays absent)."""
    if find(status, ctype) is None:
        return False
    return set_condition(status, ctype, reason=reason, message=message, now=now, true=False)


def remove(status: dict[str, Any], ctype: str) -> bool:
    """Drop a condition; returns whether it was there."""
    conditions = status.get("conditions") or []
    kept = [c for c in conditions if c.get("type") != ctype]
    if len(kept) == len(conditions):
        return False
    status["conditions"] = kept
    return True


def _falsified(condition: Condition, now: str) -> Condition:
    if condition.get("status") == "False":
        return condition
    return {**condition, "status": "False", "lastUpdateTime": now, "lastTransitionTime": now}


def state(status: dict[str, Any]) -> str:
    """What ``kubectl get`` shows: the type of the last condition."""
    conditions = status.get("conditions") or []
    return str(conditions[-1]["type"]) if conditions else ""
