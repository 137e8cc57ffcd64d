"""DAGs of the deployment tests: PyTorchJobs whose pods kwok simulates, shaped by ``dag_run.conf``.

``kt_single``: one task that waits in the worker (not deferrable) for a job whose Master runs
``conf["seconds"]`` (default 2), or until a test ends it (``conf["hang"]``); one retry.
``kt_deferred_many``: ``conf["count"]`` deferrable tasks (dynamic task mapping), each with such a job.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from _local import NAMESPACE

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task  # type: ignore[no-redef]

from kubetrain.operators import PyTorchJobOperator


def simulated_job(outcome: str, seconds: str) -> dict[str, Any]:
    """A PyTorchJob of one Master whose simulated pod ends with ``outcome`` (``succeed``, or ``hang``
    until a test changes it) after ``seconds``."""
    behaviour = {"sim.kubetrain.dev/outcome": outcome, "sim.kubetrain.dev/run-duration": seconds}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"annotations": behaviour},
                        "spec": {"containers": [{"name": "pytorch", "image": "example.com/train:1"}]},
                    },
                }
            }
        },
    }


@dag(schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False, tags=["kubetrain-test"])
def kt_single() -> None:
    PyTorchJobOperator(
        task_id="train",
        namespace=NAMESPACE,
        job=simulated_job(
            "{{ 'hang' if dag_run.conf.get('hang') else 'succeed' }}", "{{ dag_run.conf.get('seconds', 2) }}s"
        ),
        status_interval=2,
        retries=1,
        retry_delay=dt.timedelta(seconds=1),
    )


@dag(
    schedule=None,
    start_date=dt.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=500,
    tags=["kubetrain-test"],
)
def kt_deferred_many() -> None:
    @task
    def manifests(**context: Any) -> list[dict[str, Any]]:
        conf = context["dag_run"].conf or {}
        outcome = "hang" if conf.get("hang") else "succeed"
        return [
            simulated_job(outcome, f"{conf.get('seconds', 2)}s") for _ in range(int(conf.get("count", 3)))
        ]

    PyTorchJobOperator.partial(
        task_id="train",
        namespace=NAMESPACE,
        deferrable=True,
        status_interval=30,
        get_logs=False,
    ).expand(job=manifests())


kt_single()
kt_deferred_many()
