"""Checkpoint-aware resume on retry: the first try fails mid-training, the retry resumes from its checkpoint.

The training script fails at step 60 on attempt 1 (``--fail-on-attempt=1``). Airflow retries the task;
the operator sees the failed job of the first try, and submits attempt 2 with the same checkpoint
volume, which resumes from step 40 instead of starting over.
"""

from __future__ import annotations

import datetime as dt

from _local import TRAIN, example_dag

try:
    from airflow.sdk import dag
except ImportError:  # Airflow 2
    from airflow.decorators import dag  # type: ignore[no-redef]

from kubetrain.operators import PyTorchJobOperator


@dag(**example_dag())
def retry_with_resume() -> None:
    PyTorchJobOperator(
        task_id="train",
        command=[*TRAIN, "--steps=100", "--checkpoint-every=20", "--fail-at-step=60", "--fail-on-attempt=1"],
        num_workers=1,
        restart_policy="Never",
        checkpoint_dir="/checkpoints",
        checkpoint_volume="retry-with-resume",
        retries=1,
        retry_delay=dt.timedelta(seconds=1),
        status_interval=10,
    )


retry_with_resume()
