"""Client core used by the CLI, the Airflow operators and the KFP components.

``AsyncJobClient`` (asyncio) and ``JobClient`` (the same verbs, synchronous) submit,
track, wait for, stream the logs of, delete, suspend and resubmit training jobs;
``builders`` turns a handful of arguments into a PyTorchJob or TrainJob manifest.
"""

from kubetrain.client.aio import AsyncJobClient
from kubetrain.client.errors import (
    InvalidJobError,
    JobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
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
]
