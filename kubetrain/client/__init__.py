"""Client core used by the CLI, the Airflow operators and the KFP components.

``AsyncJobClient`` (asyncio) and ``JobClient`` (the same verbs, synchronous) submit,
track, wait for, stream the logs of, delete, suspend and resubmit training jobs;
``builders`` turns a handful of arguments into a PyTorchJob or TrainJob manifest;
``lineage`` is the one lifecycle of a training run's attempts (find the earlier ones,
then reattach, resume, wait or resubmit) that Airflow, KFP and the CLI share.
"""

from kubetrain.client.aio import AsyncJobClient
from kubetrain.client.errors import (
    InvalidJobError,
    JobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    LineageError,
)
from kubetrain.client.sync import JobClient

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
