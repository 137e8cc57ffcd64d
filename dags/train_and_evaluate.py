"""Submit a PyTorchJob, wait for it with a sensor, then evaluate the metrics it reported."""

from __future__ import annotations

from typing import Any

from _local import TRAIN, example_dag

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task  # type: ignore[no-redef]

from kubetrain.operators import PyTorchJobOperator, PyTorchJobSensor


@dag(**example_dag())
def train_and_evaluate() -> None:
    train = PyTorchJobOperator(
        task_id="train",
        command=[*TRAIN, "--steps=80", "--checkpoint-every=20"],
        num_workers=1,
        checkpoint_dir="/checkpoints",
        wait_for_completion=False,
    )
    wait = PyTorchJobSensor(
        task_id="wait",
        name="{{ ti.xcom_pull(task_ids='train', key='kubetrain_job')['name'] }}",
        poke_interval=2,
        timeout=600,
    )

    @task
    def evaluate(result: dict[str, Any]) -> float:
        accuracy = float(result["metrics"]["accuracy"])
        if accuracy < 0.8:
            raise ValueError(f"accuracy {accuracy:.3f} is below 0.8")
        return accuracy

    train >> wait
    evaluate(wait.output)


train_and_evaluate()
