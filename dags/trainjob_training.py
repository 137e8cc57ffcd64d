"""Train with a TrainJob (Kubeflow Trainer v2): torchrun on two nodes of a runtime, deferrable.

On the local cluster the runtime is ``torch-distributed-local``
(examples/trainjob-runtime-local.yaml), which runs on the process node; on a
real cluster, set ``KUBETRAIN_TRAINJOB_RUNTIME`` (e.g. ``torch-distributed``)
and ``KUBETRAIN_IMAGE`` to an image holding the training script.
"""

from __future__ import annotations

import datetime as dt
import os

from _local import example_dag

try:
    from airflow.sdk import dag
except ImportError:  # Airflow 2
    from airflow.decorators import dag  # type: ignore[no-redef]

from kubetrain.operators import TrainJobOperator

RUNTIME = os.environ.get("KUBETRAIN_TRAINJOB_RUNTIME", "torch-distributed-local")


@dag(**example_dag())
def trainjob_training() -> None:
    TrainJobOperator(
        task_id="train",
        runtime=RUNTIME,
        command=["torchrun", "examples/train_ddp.py"],
        args=["--steps=60", "--checkpoint-every=20"],
        num_nodes=2,
        checkpoint_dir="/checkpoints",
        deferrable=True,
        status_interval=10,
        ttl_seconds_after_finished=3600,
        execution_timeout=dt.timedelta(minutes=15),
    )


trainjob_training()
