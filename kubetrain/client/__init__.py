"""Client core used by the CLI, the Airflow operators and the KFP components.

``AsyncJobClient`` (asyncio) and ``JobClient`` (the same verbs, synchronous) submit,
track, wait for, stream the logs of, delete, suspend and resubmit training jobs;
``builders`` turns a handful of arguments into a PyTorchJob or TrainJob manifest;
``lineage`` is the one lifecycle of a training run's attempts (find the earlier ones,
then reattach, resume, wait or resubmit) that Airflow, KFP and the CLI share; ``attempt`` runs one
attempt for them (prepare, follow with status lines, result, finish).

The two clients are imported when first asked for: they need ``kubernetes_asyncio``'s generated API,
and the pure modules here (``kinds``, ``lineage``) are also read by the controller, which does without
that API and its memory.
"""

from typing import TYPE_CHECKING, Any

from kubetrain.client.errors import (
    InvalidJobError,
    JobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    LineageError,
)

if TYPE_CHECKING:
    from kubetrain.client.aio import AsyncJobClient
    from kubetrain.client.sync import JobClient


def __getattr__(name: str) -> Any:
    if name == "AsyncJobClient":
        from kubetrain.client.aio import AsyncJobClient

        return AsyncJobClient
    if name == "JobClient":
        from kubetrain.client.sync import JobClient

        return JobClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncJobClient",
    "InvalidJobError",
    "JobClient",
    "JobError",
    "JobExistsError",
    "JobFailedError",
    "JobNotFoundError",
    "JobTimeoutError",
    "LineageError",
]
