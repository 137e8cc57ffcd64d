"""A hyperparameter sweep with dynamic task mapping: one PyTorchJob per learning rate, then pick the best."""

from __future__ import annotations

from typing import Any

from _local import example_dag

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task  # type: ignore[no-redef]

from kubetrain.operators import PyTorchJobOperator

LEARNING_RATES = [0.01, 0.05, 0.2]


@dag(**example_dag())
def hyperparameter_sweep() -> None:
    trained = PyTorchJobOperator.partial(
        task_id="train",
        command=["python", "examples/train_ddp.py"],
        num_workers=0,
        checkpoint_dir="/checkpoints",
        status_interval=10,
    ).expand(args=[[f"--lr={lr}", "--steps=60", "--checkpoint-every=30"] for lr in LEARNING_RATES])

    @task
    def best(results: list[dict[str, Any]]) -> dict[str, Any]:
        winner = max(results, key=lambda r: r["metrics"]["accuracy"])
        print(f"best run: {winner['name']} accuracy {winner['metrics']['accuracy']}")
        return winner

    best(trained.output)


hyperparameter_sweep()
