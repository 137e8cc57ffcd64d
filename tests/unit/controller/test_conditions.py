"""Condition bookkeeping: upstream's rules, with the current state always last."""

from __future__ import annotations

from typing import Any

from kubetrain.controller.core import conditions as cond


def _set(status: dict[str, Any], ctype: str, reason: str, *, true: bool = True, now: str = "t1") -> bool:
    return cond.V1.set(status, ctype, reason=reason, message=reason, now=now, true=true)


def _view(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status["conditions"]]


def test_created_then_running_then_restarting_replaces_running() -> None:
    status: dict[str, Any] = {}
    _set(status, "Created", "JobCreated")
    _set(status, "Running", "JobRunning")
    assert _view(status) == [("Created", "True"), ("Running", "True")]
    _set(status, "Restarting", "JobRestarting")
    assert _view(status) == [("Created", "True"), ("Restarting", "True")]
    _set(status, "Running", "JobRunning")
    assert _view(status) == [("Created", "True"), ("Running", "True")]


def test_finishing_turns_running_false_and_keeps_the_finish_last() -> None:
    status: dict[str, Any] = {}
    _set(status, "Created", "JobCreated")
    _set(status, "Running", "JobRunning")
    _set(status, "Succeeded", "JobSucceeded")
    assert _view(status) == [("Running", "False"), ("Created", "True"), ("Succeeded", "True")]
    assert cond.state(status) == "Succeeded"


def test_failed_is_terminal() -> None:
    status: dict[str, Any] = {}
    _set(status, "Failed", "JobFailed")
    assert not _set(status, "Running", "JobRunning")
    assert not _set(status, "Succeeded", "JobSucceeded")
    assert cond.state(status) == "Failed"


def test_same_type_status_and_reason_changes_nothing() -> None:
    status: dict[str, Any] = {}
    _set(status, "Running", "JobRunning", now="t1")
    assert not _set(status, "Running", "JobRunning", now="t2")
    assert status["conditions"][0]["lastTransitionTime"] == "t1"


def test_a_resumed_job_shows_created_not_suspended() -> None:
    status: dict[str, Any] = {}
    _set(status, "Created", "JobCreated")
    _set(status, "Running", "JobRunning")
    cond.V1.set_false(status, "Running", reason="JobSuspended", message="", now="t2")
    _set(status, "Suspended", "JobSuspended")
    assert cond.state(status) == "Suspended"
    _set(status, "Suspended", "JobResumed", true=False)
    assert cond.state(status) == "Created", "a False condition is never the last one"
    _set(status, "Running", "JobRunning")
    assert cond.state(status) == "Running"


def test_a_reason_change_with_the_same_status_keeps_the_transition_time() -> None:
    status: dict[str, Any] = {}
    _set(status, "Running", "JobRunning", now="t1")
    _set(status, "Running", "JobRunningAgain", now="t2")
    (condition,) = status["conditions"]
    assert (condition["reason"], condition["lastTransitionTime"], condition["lastUpdateTime"]) == (
        "JobRunningAgain",
        "t1",
        "t2",
    )


def test_set_false_ignores_conditions_never_seen() -> None:
    status: dict[str, Any] = {}
    assert not cond.V1.set_false(status, "Running", reason="x", message="x", now="t")
    assert "conditions" not in status


def test_a_note_on_a_finished_job_keeps_the_finish_last_and_is_written_once() -> None:
    status: dict[str, Any] = {}
    cond.TRAINJOB.set(status, "Complete", reason="AllJobsCompleted", message="done", now="t1")
    note = {"reason": "OutputOnOwnedClaim", "message": "kept", "now": "t2"}
    assert cond.note_on_finished(status, cond.DELETION_HELD, **note)
    assert _view(status) == [("DeletionHeld", "True"), ("Complete", "True")]
    assert cond.state(status) == "Complete"
    assert not cond.note_on_finished(status, cond.DELETION_HELD, **{**note, "now": "t3"})
    assert status["conditions"][0]["lastTransitionTime"] == "t2"
