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
    """The job ended Failed: its reason, its message and the last lines of the log of the replica that
    failed first (``whose``; rank 0's when the controller named none)."""

    def __init__(self, name: str, reason: str, message: str, logs: str = "", whose: str = "rank 0") -> None:
        self.name = name
        self.reason = reason
        self.message = message
        self.logs = logs
        self.whose = whose
        text = f"job {name} failed ({reason}): {message}"
        if logs:
            text += f"\nlast log lines of {whose}:\n" + logs
        super().__init__(text)


class LineageError(JobError):
    """What an earlier attempt of a training run left makes the next step impossible for now, or ever
    (pods still running, a name taken by another run's job, a job that cannot resume); says which."""

    def __init__(self, message: str, *, action: str = "error", pods: tuple[str, ...] = ()) -> None:
        self.action = action  # the decision that could not be carried out: "error" or "wait"
        self.pods = pods  # the live pods waited for, when action is "wait"
        super().__init__(message)


class JobTimeoutError(JobError, TimeoutError):
    """The job did not finish in time; says what it was doing."""
