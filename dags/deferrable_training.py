"""Train with a PyTorchJob and wait in the triggerer, freeing the worker slot."""

from __future__ import annotations

import datetime as dt

from _local import TRAIN, example_dag

try:
    from airflow.sdk import dag
except ImportError:  # Airflow 2
    from airflow.decorators import dag  # type: ignore[no-redef]

from kubetrain.operators import PyTorchJobOperator


@dag(**example_dag())
def deferrable_training() -> None:
    PyTorchJobOperator(
        task_id="train",
        command=[*TRAIN, "--steps=80", "--checkpoint-every=20"],
        num_workers=2,
        checkpoint_dir="/checkpoints",
        deferrable=True,
        status_interval=10,
        ttl_seconds_after_finished=3600,
        execution_timeout=dt.timedelta(minutes=15),
    )


deferrable_training()
