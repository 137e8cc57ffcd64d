"""The example DAGs run end to end with ``dag.test()`` against the dev cluster and its process node.

``dag.test()`` runs tasks in this process and needs the main thread, so these tests are synchronous
and the controller runs as a process of its own.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import re
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubetrain.client import JobClient
from kubetrain.devcluster.cluster import DevCluster
from kubetrain.naming import ANNOTATION_ATTEMPT
from kubetrain.operators import JobTrigger, PyTorchJobOperator
from kubetrain.operators.compat import AIRFLOW_V_3_0_PLUS, AirflowException
from tests.airflow.conftest import REPO, load_dag
from tests.airflow.support import FakeTaskInstance, execute
from tests.support import HANG, pytorchjob, runs_for

pytestmark = pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "controller_process")


def _states(dag_run: Any) -> dict[str, str]:
    return {
        ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
        for ti in dag_run.get_task_instances()
    }


def _run(dag_id: str) -> Any:
    dag, now = load_dag(dag_id), dt.datetime.now(dt.UTC)
    return dag.test(logical_date=now) if AIRFLOW_V_3_0_PLUS else dag.test(execution_date=now)


def _until(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_train_then_evaluate_with_a_sensor(dag_namespace: str, sync_jobs: JobClient) -> None:
    run = _run("train_and_evaluate")
    assert _states(run) == {"train": "success", "wait": "success", "evaluate": "success"}, _states(run)
    (job,) = sync_jobs.list(kind="PyTorchJob", namespace=dag_namespace)
    labels = job["metadata"]["labels"]
    assert (
        labels["kubetrain.dev/dag-id"] == "train_and_evaluate" and labels["kubetrain.dev/task-id"] == "train"
    )


def test_deferrable_training(dag_namespace: str) -> None:
    run = _run("deferrable_training")
    assert _states(run) == {"train": "success"}, _states(run)
    result = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert result["state"] == "Succeeded" and result["metrics"]["accuracy"] > 0.5


def _attempts_seen(dag_run: Any, jobs: JobClient, namespace: str) -> str:
    """What a failed retry run leaves to read: the task's tries, and each attempt's end and log tail
    (the Airflow log of the run is too long to survive in a CI summary)."""
    ti = dag_run.get_task_instance("train")
    lines = [f"task {ti.state} after try {ti.try_number}"]
    for job in jobs.list(kind="PyTorchJob", namespace=namespace):
        meta, last = job["metadata"], (job.get("status", {}).get("conditions") or [{}])[-1]
        whose, tail = jobs.run(jobs.aio.failure_logs(job)) if last.get("type") == "Failed" else ("", "")
        lines.append(
            f"{meta['name']} attempt {meta['annotations'].get(ANNOTATION_ATTEMPT)}: {last.get('type')} "
            f"{last.get('reason')} {last.get('message')}; {whose} log: {' / '.join(tail.splitlines()[-8:])}"
        )
    return " | ".join(lines)


@pytest.mark.main_airflow_only  # on 2.11: the retry the scheduler schedules in tests/airflow/deployment
def test_a_retry_resumes_from_the_checkpoint_of_the_failed_try(
    dag_namespace: str, sync_jobs: JobClient
) -> None:
    sync_jobs.aio  # noqa: B018 - the claim is created through the core API of the same client
    asyncio_claim = {
        "metadata": {"name": "retry-with-resume"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    sync_jobs._run(sync_jobs.aio.core.create_namespaced_persistent_volume_claim(dag_namespace, asyncio_claim))
    run = _run("retry_with_resume")
    assert _states(run) == {"train": "success"}, _attempts_seen(run, sync_jobs, dag_namespace)
    result = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert result["attempt"] == 2
    assert result["report"]["resumed_from_step"] == 40, result["report"]
    jobs = sync_jobs.list(kind="PyTorchJob", namespace=dag_namespace)
    attempts = sorted(
        (j["metadata"]["annotations"][ANNOTATION_ATTEMPT], j["status"]["conditions"][-1]["type"])
        for j in jobs
    )
    assert attempts == [("1", "Failed"), ("2", "Succeeded")], "the retry must not reattach to the failed job"
    assert len({j["metadata"]["labels"]["kubetrain.dev/lineage"] for j in jobs}) == 1


def test_a_trainjob_trains_through_the_trainjob_operator(
    dag_namespace: str, sync_jobs: JobClient, kubectl: Any
) -> None:
    kubectl("apply", "--server-side", "-f", str(REPO / "examples" / "trainjob-runtime-local.yaml"))
    run = _run("trainjob_training")
    assert _states(run) == {"train": "success"}, _states(run)
    result = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert result["kind"] == "TrainJob" and result["state"] == "Succeeded"
    assert result["metrics"]["accuracy"] > 0.5 and result["last_checkpoint"] == "/checkpoints/step-00000060"
    (job,) = sync_jobs.list(kind="TrainJob", namespace=dag_namespace)
    assert job["spec"]["trainer"]["numNodes"] == 2


@pytest.mark.main_airflow_only  # on 2.11: the deferred tasks of tests/airflow/deployment are mapped
def test_a_hyperparameter_sweep_maps_one_job_per_value(dag_namespace: str) -> None:
    run = _run("hyperparameter_sweep")
    assert _states(run) == {
        "train[0]": "success",
        "train[1]": "success",
        "train[2]": "success",
        "best": "success",
    }, _states(run)


@dataclass
class MappedTaskInstance(FakeTaskInstance):
    """One map index of a mapped task, its XComs in a table shared with the other map indexes. As on
    Airflow 2, a pull without ``map_indexes`` returns the first map index's value."""

    table: dict[tuple[str, int], Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.table[key, self.map_index] = value

    def xcom_pull(
        self, task_ids: str | None = None, key: str = "return_value", map_indexes: int | None = None
    ) -> Any:
        found = sorted((index, value) for (k, index), value in self.table.items() if k == key)
        if map_indexes is None:
            return found[0][1] if found else None
        return next((value for index, value in found if index == map_indexes), None)


def _execute_in_thread(op: Any, ti: FakeTaskInstance, outcome: dict[str, Any]) -> threading.Thread:
    """Run ``op.execute`` as a worker would, in a thread; its result or error lands in ``outcome``."""

    def run() -> None:
        try:
            outcome["result"] = execute(op, {"ti": ti})
        except AirflowException as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_on_kill_deletes_the_job_and_leaves_no_pods(dag_namespace: str, sync_jobs: JobClient) -> None:
    # Simulated pods that never end by themselves: only on_kill can stop this job.
    manifest = pytorchjob("kill-me", workers=1, master_annotations=HANG, worker_annotations=HANG)
    op = PyTorchJobOperator(
        task_id="train", namespace=dag_namespace, job=manifest, get_logs=False, status_interval=1
    )
    outcome: dict[str, Any] = {}
    thread = _execute_in_thread(op, FakeTaskInstance(), outcome)

    def running() -> bool:
        job = sync_jobs.get("PyTorchJob", "kill-me", dag_namespace)
        return (
            job is not None
            and len([p for p in sync_jobs._run(sync_jobs.aio.pods(job)) if p.status.phase == "Running"]) == 2
        )

    _until(running, 60, "the job's pods to run")
    op.on_kill()
    thread.join(60)
    assert "killed" in outcome.get("error", ""), outcome

    def gone() -> bool:
        pods = sync_jobs._run(sync_jobs.aio.core.list_namespaced_pod(dag_namespace)).items
        return sync_jobs.get("PyTorchJob", "kill-me", dag_namespace) is None and not pods

    _until(gone, 60, "the job and its pods to be gone")


def test_on_kill_of_a_mapped_task_stops_its_own_map_indexs_job_only(
    dag_namespace: str, sync_jobs: JobClient
) -> None:
    manifest = pytorchjob("unnamed", workers=0, master_annotations=HANG)
    del manifest["metadata"]["name"]  # each map index names its job after itself
    table: dict[tuple[str, int], Any] = {}
    runs = []
    for index in (0, 1):
        op = PyTorchJobOperator(
            task_id="train",
            namespace=dag_namespace,
            job=copy.deepcopy(manifest),
            get_logs=False,
            status_interval=1,
        )
        outcome: dict[str, Any] = {}
        ti = MappedTaskInstance(task_id="train", run_id="manual__mapped", map_index=index, table=table)
        runs.append((op, outcome, _execute_in_thread(op, ti, outcome)))

    def both_running() -> list[Any] | None:
        jobs = sync_jobs.list(kind="PyTorchJob", namespace=dag_namespace)
        running = [j for j in jobs if sync_jobs.pods(j)]
        return running if len(running) == 2 else None

    _until(both_running, 60, "both map indexes' jobs to have pods")
    mine = {index: runs[index][0]._job_ref["name"] for index in (0, 1)}
    assert mine[0] != mine[1]
    killed, survivor = runs[1], runs[0]
    # Map index 1 is killed at a moment its operator holds no reference to its job yet: it finds
    # the job through its own map index's XCom, checked to be its own. Without map_indexes,
    # Airflow 2's XCom would name map index 0's job.
    killed[0]._job_ref = None
    killed[0].on_kill()
    killed[2].join(60)
    assert "killed" in killed[1].get("error", ""), killed[1]
    _until(lambda: sync_jobs.get("PyTorchJob", mine[1], dag_namespace) is None, 60, "map index 1's job to go")
    left = sync_jobs.get("PyTorchJob", mine[0], dag_namespace)
    assert left is not None and left["metadata"].get("deletionTimestamp") is None, "map index 0's job is kept"
    assert left["metadata"]["labels"]["kubetrain.dev/map-index"] == "0"
    survivor[0].on_kill()
    survivor[2].join(60)


def test_a_cleared_task_returns_its_result_or_with_rerun_on_clear_trains_again(
    dag_namespace: str, sync_jobs: JobClient
) -> None:
    manifest = pytorchjob("quick", workers=0, master_annotations=runs_for("1s"))

    def run(rerun_on_clear: bool, try_number: int) -> dict[str, Any]:
        op = PyTorchJobOperator(
            task_id="train",
            namespace=dag_namespace,
            job=manifest,
            get_logs=False,
            status_interval=1,
            rerun_on_clear=rerun_on_clear,
        )
        outcome: dict[str, Any] = {}
        _execute_in_thread(op, FakeTaskInstance(run_id="manual__clear", try_number=try_number), outcome).join(
            120
        )
        assert "result" in outcome, outcome
        return dict(outcome["result"])

    first = run(rerun_on_clear=True, try_number=1)
    assert (first["name"], first["attempt"], first["state"]) == ("quick", 1, "Succeeded")
    cleared = run(rerun_on_clear=False, try_number=2)
    assert (cleared["name"], cleared["uid"]) == ("quick", first["uid"]), "the default returns the result"
    retrained = run(rerun_on_clear=True, try_number=3)
    assert (retrained["name"], retrained["attempt"], retrained["state"]) == ("quick-a2", 2, "Succeeded")
    assert sorted(
        j["metadata"]["name"] for j in sync_jobs.list(kind="PyTorchJob", namespace=dag_namespace)
    ) == [
        "quick",
        "quick-a2",
    ]


def _apiserver_requests(cluster: DevCluster, verb: str, resource: str) -> float:
    state = cluster.load_state()
    assert state is not None
    request = urllib.request.Request(f"{state.server}/metrics")
    request.add_header("Authorization", f"Bearer {cluster.pki.token('admin')}")
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    text = urllib.request.urlopen(request, context=context, timeout=30).read().decode()
    pattern = re.compile(r"^apiserver_request_total\{(.*)\} ([0-9.e+]+)$")
    total = 0.0
    for line in text.splitlines():
        match = pattern.match(line)
        if match and f'verb="{verb}"' in match[1] and f'resource="{resource}"' in match[1]:
            total += float(match[2])
    return total


def _terminating_namespaces(jobs: JobClient) -> list[str]:
    """Namespaces being deleted: the namespace controller lists every kind in them, which would count."""
    namespaces = jobs._run(jobs.aio.core.list_namespace()).items
    return [ns.metadata.name for ns in namespaces if ns.status.phase == "Terminating"]


@pytest.mark.main_airflow_only  # on 2.11: the triggerer restart in tests/airflow/deployment
def test_a_hundred_deferred_waits_share_one_watch(
    dag_namespace: str, sync_jobs: JobClient, dev_cluster: DevCluster, kubeconfig: Path
) -> None:
    count = 100
    for i in range(count):
        sync_jobs.create(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": f"wait-{i:03d}"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "template": {
                                "metadata": {"annotations": runs_for("5s")},
                                "spec": {"containers": [{"name": "pytorch", "image": "img"}]},
                            },
                        }
                    }
                },
            },
            namespace=dag_namespace,
        )
    _until(lambda: not _terminating_namespaces(sync_jobs), 120, "earlier tests' namespaces to be gone")
    watches_before = _apiserver_requests(dev_cluster, "WATCH", "pytorchjobs")
    lists_before = _apiserver_requests(dev_cluster, "LIST", "pytorchjobs")
    connection = {
        "in_cluster": False,
        "config_dict": None,
        "config_file": str(kubeconfig),
        "context": None,
        "namespace": None,
    }
    triggers = [
        JobTrigger(
            kind="PyTorchJob",
            name=f"wait-{i:03d}",
            namespace=dag_namespace,
            connection=connection,
            status_interval=30,
            get_logs=False,
        )
        for i in range(count)
    ]

    async def all_events() -> list[Any]:
        async def first(trigger: JobTrigger) -> Any:
            async for event in trigger.run():
                return event.payload
            return None

        return await asyncio.wait_for(asyncio.gather(*(first(t) for t in triggers)), 180)

    events = asyncio.run(all_events())  # one event loop, as in a triggerer
    assert [e["status"] for e in events] == ["success"] * count
    watches = _apiserver_requests(dev_cluster, "WATCH", "pytorchjobs") - watches_before
    lists = _apiserver_requests(dev_cluster, "LIST", "pytorchjobs") - lists_before
    # One list and one watch for all of them (a watch may be reopened once); one per trigger would be 100.
    assert watches <= 2, f"{count} deferred waits opened {watches:.0f} watches"
    assert lists <= 2, f"{count} deferred waits listed {lists:.0f} times"
