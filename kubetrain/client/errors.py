"""What can go wrong with a training job, as exceptions that carry enough to act on."""

from __future__ import annotations


class JobError(RuntimeError):
    """Base of the client's errors."""


class InvalidJobError(JobError, ValueError):
    """The job was rejected before it ran (client-side validation or the API server); names the field."""


class JobExistsError(JobError):
    """A job of that name already exists."""


class JobNotFoundError(JobError):
    """No such job."""


class JobFailedError(JobError):
    """The job ended Failed: its reason, its message and the last lines of rank 0's log."""

    def __init__(self, name: str, reason: str, message: str, logs: str = "") -> None:
        self.name = name
        self.reason = reason
        self.message = message
        self.logs = logs
        text = f"job {name} failed ({reason}): {message}"
        if logs:
            text += "\nlast log lines of rank 0:\n" + logs
        super().__init__(text)


class JobTimeoutError(JobError, TimeoutError):
    """The job did not finish in time; says what it was doing."""
