"""The provider in a real Airflow deployment: Postgres, the API server (webserver on 2.11), the
scheduler with the LocalExecutor, the DAG processor and the triggerer, each a process of its own.

DAG runs are triggered and watched through the REST API, processes are killed by pid, and what the
deployment asks of the cluster is read from the recording proxy in front of it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import ssl
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s

from kubetrain import naming
from kubetrain.client import JobClient, kinds
from kubetrain.devcluster import process
from kubetrain.devcluster.airflow_api import AirflowApi
from kubetrain.devcluster.airflow_deploy import AirflowDeployment
from kubetrain.devcluster.cluster import DevCluster
from kubetrain.operators.compat import AIRFLOW_V_3_0_PLUS
from tests.airflow.deployment.conftest import Runs
from tests.airflow.deployment.harness import EXAMPLE_DAGS, RecordingProxy, finish_pods, until, watches
from tests.docs_commands import run_documented, shell_env
from tests.e2e.test_closed_cluster import reached, ways_in_from_a_pod

# The issue of scale is the triggerer's; 50 deferred tasks take minutes on two cores, so the default is
# smaller and KUBETRAIN_AIRFLOW_DEFERRED_TASKS=50 runs the full size.
DEFERRED_TASKS = int(os.environ.get("KUBETRAIN_AIRFLOW_DEFERRED_TASKS", "10"))
Query = Callable[..., list[tuple[Any, ...]]]


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def run_jobs(client: JobClient, namespace: str, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The jobs of one DAG run, found by their readable labels (the test's run ids keep every character)."""
    selector = f"{naming.LABEL_DAG_ID}={dag_id},{naming.LABEL_RUN_ID}={naming.label_value(run_id)}"
    return client.list(kind="PyTorchJob", namespace=namespace, label_selector=selector)


def creates(proxy: RecordingProxy, since: float, namespace: str) -> list[Any]:
    """PyTorchJobs created (not dry runs) through the proxy since ``since``."""
    return [
        e
        for e in proxy.since(since)
        if e.method == "POST"
        and e.path.endswith(f"/namespaces/{namespace}/pytorchjobs")
        and "dryRun" not in e.query
        and e.status == 201
    ]


def pods_of(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    listed = kubectl(
        "get", "pods", "-n", namespace, "-l", f"training.kubeflow.org/job-name={job}", "-o", "json"
    )
    return list(json.loads(listed.stdout)["items"])


def test_the_example_dags_are_served_without_import_errors(
    api: AirflowApi, deployment: AirflowDeployment, kubeconfig: Path, airflow_namespace: str, tmp_path: Path
) -> None:
    assert api.import_errors() == []
    for dag_id in EXAMPLE_DAGS:
        dag = api.dag(dag_id)
        assert dag is not None and not dag["is_paused"], dag
    status = run_documented(
        "docs/airflow.md",
        "kubetrain dev airflow status",
        env=shell_env(kubeconfig, airflow_namespace, tmp_path),
        replace={
            "kubetrain dev airflow status": f"kubetrain dev airflow status --airflow-dir={deployment.root}"
        },
    )
    web = "api-server" if AIRFLOW_V_3_0_PLUS else "webserver"
    for name in ("postgres", web, "scheduler", "dag-processor", "triggerer"):
        assert name in status.stdout, status.stdout


def test_a_retry_scheduled_by_the_scheduler_resumes_from_the_failed_try_s_checkpoint(
    runs: Runs, api: AirflowApi, sync_jobs: JobClient, airflow_namespace: str
) -> None:
    run_id = runs.trigger("retry_with_resume")
    assert runs.wait("retry_with_resume", run_id) == "success", runs.logs("retry_with_resume", run_id)
    tries = api.tries("retry_with_resume", run_id, "train")
    assert [t["state"] for t in tries] == ["failed", "success"], tries
    first_end, second_start = _time(tries[0]["end_date"]), _time(tries[1]["start_date"])
    assert second_start - first_end >= dt.timedelta(seconds=1), "the retry ran before its retry_delay"
    result = api.xcom("retry_with_resume", run_id, "train")
    jobs = run_jobs(sync_jobs, airflow_namespace, "retry_with_resume", run_id)
    states = sorted((j["metadata"]["annotations"][naming.ANNOTATION_ATTEMPT], kinds.state(j)) for j in jobs)
    assert states == [("1", "Failed"), ("2", "Succeeded")], states
    second = next(j for j in jobs if kinds.state(j) == "Succeeded")
    assert (result["name"], result["uid"], result["attempt"]) == (
        second["metadata"]["name"],
        second["metadata"]["uid"],
        2,
    )
    assert result["report"]["resumed_from_step"] == 40, result["report"]
    assert result["last_checkpoint"] == second["metadata"]["annotations"][naming.ANNOTATION_LAST_CHECKPOINT]


def test_a_deferred_task_waits_in_the_triggerer_whose_database_row_holds_no_secret(
    runs: Runs,
    api: AirflowApi,
    deployment: AirflowDeployment,
    database: Query,
    dev_cluster: DevCluster,
    sync_jobs: JobClient,
    kubectl: Any,
    airflow_namespace: str,
) -> None:
    from cryptography.fernet import Fernet

    run_id = runs.trigger("kt_deferred_many", count=1, hang=True)
    runs.wait_ti("kt_deferred_many", run_id, "train", ("deferred",), map_index=0)
    row = database(
        "select t.id, t.classpath, t.kwargs from trigger t join task_instance ti on ti.trigger_id = t.id "
        "where ti.dag_id = %s and ti.run_id = %s",
        ("kt_deferred_many", run_id),
    )
    ((trigger_id, classpath, stored),) = row
    assert classpath == "kubetrain.operators.triggers.JobTrigger"
    state = deployment.load_state()
    assert state is not None
    # Airflow 2.11 encrypts the kwargs with the Fernet key; Airflow 3 keeps what the task sent through
    # the execution API, plain JSON. Either way they must hold nothing secret.
    plain = stored.startswith("{")
    assert plain == AIRFLOW_V_3_0_PLUS, stored[:100]
    kwargs = (
        stored if plain else Fernet(state.secrets["fernet_key"].encode()).decrypt(stored.encode()).decode()
    )
    (job,) = run_jobs(sync_jobs, airflow_namespace, "kt_deferred_many", run_id)
    name = job["metadata"]["name"]
    assert name in kwargs and '"kubernetes_conn_id"' in kwargs and "kubernetes_default" in kwargs
    token = yaml.safe_load(dev_cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    for secret_or_spec in (token, "kube_config", "config_dict", "containers", "image", "sim.kubetrain.dev"):
        assert secret_or_spec not in kwargs, f"{secret_or_spec!r} in the trigger's kwargs: {kwargs}"

    def taken() -> Any:
        picked = database("select triggerer_id from trigger where id = %s", (trigger_id,))
        return picked and picked[0][0]

    triggerer_id = until(taken, 120, "the triggerer to pick the trigger up")
    ((job_type, job_state),) = database("select job_type, state from job where id = %s", (triggerer_id,))
    assert (job_type, job_state) == ("TriggererJob", "running")
    finish_pods(kubectl, airflow_namespace, [name])
    assert runs.wait("kt_deferred_many", run_id) == "success", runs.logs("kt_deferred_many", run_id)
    result = api.xcom("kt_deferred_many", run_id, "train", map_index=0)
    assert (result["name"], result["uid"], result["state"]) == (name, job["metadata"]["uid"], "Succeeded")
    assert [t["try_number"] for t in api.tries("kt_deferred_many", run_id, "train", 0)] == [1]
    # The trigger ran in that triggerer process, which wrote its status lines to a log of its own.
    logs = deployment.layout.home / "logs" / "dag_id=kt_deferred_many" / f"run_id={run_id}"
    (trigger_log,) = logs.rglob(f"*.trigger.{triggerer_id}.log")
    assert f"PyTorchJob {airflow_namespace}/{name}: " in trigger_log.read_text()
    if (
        not AIRFLOW_V_3_0_PLUS
    ):  # 2.11's triggerer also names each trigger in its own log (3's only counts them)
        triggerer_log = deployment.log_path("triggerer").read_text()
        assert f"trigger kt_deferred_many/{run_id}/train/0/1 (ID {trigger_id}) starting" in triggerer_log


def test_a_new_triggerer_completes_every_deferred_task_once_after_the_old_one_is_killed(
    runs: Runs,
    api: AirflowApi,
    deployment: AirflowDeployment,
    database: Query,
    sync_jobs: JobClient,
    recording_proxy: RecordingProxy,
    kubectl: Any,
    kubeconfig: Path,
    airflow_namespace: str,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    run_id = runs.trigger("kt_deferred_many", count=DEFERRED_TASKS, hang=True)

    def all_deferred() -> bool:
        tis = [t for t in api.task_instances("kt_deferred_many", run_id) if t["task_id"] == "train"]
        return len(tis) == DEFERRED_TASKS and all(t["state"] == "deferred" for t in tis)

    until(all_deferred, 120 + 10 * DEFERRED_TASKS, f"{DEFERRED_TASKS} tasks to be deferred", interval=2)
    jobs = run_jobs(sync_jobs, airflow_namespace, "kt_deferred_many", run_id)
    assert len(jobs) == DEFERRED_TASKS

    def triggerers() -> set[Any]:
        owners = database(
            "select t.triggerer_id from trigger t join task_instance ti on ti.trigger_id = t.id "
            "where ti.dag_id = 'kt_deferred_many' and ti.run_id = %s",
            (run_id,),
        )
        return {o for (o,) in owners} if len(owners) == DEFERRED_TASKS else set()

    def watching(since: float) -> bool:
        return any(e.finished is None for e in watches(recording_proxy.since(since), "pytorchjobs"))

    until(lambda: None not in triggerers() and watching(started), 180, "the triggerer to watch the jobs")
    (old_triggerer,) = triggerers()
    old_pid = deployment.pid("triggerer")
    killed = time.monotonic()
    run_documented(
        "docs/airflow.md",
        "kubetrain dev airflow restart triggerer --kill",
        env=shell_env(kubeconfig, airflow_namespace, tmp_path),
        replace={"--kill": f"--kill --airflow-dir={deployment.root}"},
    )
    assert deployment.pid("triggerer") != old_pid and not process.pid_alive(old_pid)
    until(
        lambda: triggerers() - {None, old_triggerer} and len(triggerers()) == 1 and watching(killed),
        180,
        "a new triggerer to take every trigger over and watch the jobs",
        interval=2,
    )
    finish_pods(kubectl, airflow_namespace, [j["metadata"]["name"] for j in jobs])
    assert runs.wait("kt_deferred_many", run_id, timeout=300 + 10 * DEFERRED_TASKS) == "success", runs.logs(
        "kt_deferred_many", run_id
    )

    by_index = {int(j["metadata"]["labels"][naming.LABEL_MAP_INDEX]): j for j in jobs}
    for index in range(DEFERRED_TASKS):
        result = api.xcom("kt_deferred_many", run_id, "train", map_index=index)
        job = by_index[index]
        assert (result["name"], result["uid"], result["state"]) == (
            job["metadata"]["name"],
            job["metadata"]["uid"],
            "Succeeded",
        )
    assert len(run_jobs(sync_jobs, airflow_namespace, "kt_deferred_many", run_id)) == DEFERRED_TASKS
    assert len(creates(recording_proxy, started, airflow_namespace)) == DEFERRED_TASKS, (
        "a job was submitted twice"
    )
    opened = watches(recording_proxy.since(killed), "pytorchjobs")
    assert 1 <= len(opened) <= 2, f"the new triggerer opened {len(opened)} watches for {DEFERRED_TASKS} tasks"


def test_a_retry_after_the_worker_was_killed_reattaches_to_the_running_job(
    runs: Runs,
    api: AirflowApi,
    sync_jobs: JobClient,
    recording_proxy: RecordingProxy,
    kubectl: Any,
    airflow_namespace: str,
) -> None:
    started = time.monotonic()
    run_id = runs.trigger("kt_single", hang=True)

    def running_with_pid() -> dict[str, Any] | None:
        ti = runs.ti("kt_single", run_id, "train")
        return ti if ti["state"] == "running" and ti.get("pid") else None

    running = until(running_with_pid, 300, "the task to run, with its pid recorded", interval=0.5)
    (job,) = until(lambda: run_jobs(sync_jobs, airflow_namespace, "kt_single", run_id), 120, "the job")
    name = job["metadata"]["name"]
    (pod,) = until(
        lambda: [
            p for p in pods_of(kubectl, airflow_namespace, name) if p["status"].get("phase") == "Running"
        ],
        120,
        "the job's pod to run",
    )
    os.kill(int(running["pid"]), signal.SIGKILL)

    def retried() -> bool:
        ti = runs.ti("kt_single", run_id, "train")
        return int(ti["try_number"]) == 2 and ti["state"] == "running"

    until(retried, 180, "the scheduler to run the retry", interval=1)
    first = api.tries("kt_single", run_id, "train")[0]
    assert first["state"] in ("failed", "up_for_retry"), first
    time.sleep(5)  # the retry has had time to submit a second job, if it were to
    finish_pods(kubectl, airflow_namespace, [name])
    assert runs.wait("kt_single", run_id) == "success", runs.logs("kt_single", run_id)
    (after,) = run_jobs(sync_jobs, airflow_namespace, "kt_single", run_id)
    assert after["metadata"]["uid"] == job["metadata"]["uid"], "the retry submitted another job"
    (pod_after,) = pods_of(kubectl, airflow_namespace, name)
    assert pod_after["metadata"]["uid"] == pod["metadata"]["uid"], "the job's pod was replaced"
    result = api.xcom("kt_single", run_id, "train")
    assert (result["uid"], result["attempt"], result["state"]) == (job["metadata"]["uid"], 1, "Succeeded")
    assert len(creates(recording_proxy, started, airflow_namespace)) == 1


@pytest.mark.main_airflow_only  # on 2.11: the retry, deferral, triggerer and worker tests
def test_marking_a_running_task_failed_deletes_its_job(
    runs: Runs, api: AirflowApi, sync_jobs: JobClient, airflow_namespace: str
) -> None:
    run_id = runs.trigger("kt_single", hang=True)
    runs.wait_ti("kt_single", run_id, "train", ("running",))
    (job,) = until(lambda: run_jobs(sync_jobs, airflow_namespace, "kt_single", run_id), 120, "the job")
    api.set_state("kt_single", run_id, "train", "failed")
    until(
        lambda: sync_jobs.get("PyTorchJob", job["metadata"]["name"], airflow_namespace) is None,
        120,
        "on_kill to delete the job",
    )
    assert runs.wait("kt_single", run_id) == "failed", runs.logs("kt_single", run_id)
    assert [t["state"] for t in api.tries("kt_single", run_id, "train")] == ["failed"]


@pytest.mark.main_airflow_only  # on 2.11: the retry, deferral, triggerer and worker tests
def test_clearing_a_succeeded_task_returns_its_result_without_training_again(
    runs: Runs, api: AirflowApi, sync_jobs: JobClient, recording_proxy: RecordingProxy, airflow_namespace: str
) -> None:
    started = time.monotonic()
    run_id = runs.trigger("kt_single", seconds=1)
    assert runs.wait("kt_single", run_id) == "success", runs.logs("kt_single", run_id)
    first = api.xcom("kt_single", run_id, "train")
    api.clear("kt_single", run_id, ["train"])

    def ran_again() -> bool:
        ti = runs.ti("kt_single", run_id, "train")
        return int(ti["try_number"]) == 2 and ti["state"] == "success"

    until(ran_again, 180, "the cleared task to run again", interval=1)
    again = api.xcom("kt_single", run_id, "train")
    assert (again["uid"], again["state"]) == (first["uid"], "Succeeded")
    assert len(run_jobs(sync_jobs, airflow_namespace, "kt_single", run_id)) == 1
    assert len(creates(recording_proxy, started, airflow_namespace)) == 1


@pytest.mark.main_airflow_only  # on 2.11: the retry, deferral, triggerer and worker tests
def test_the_api_server_serves_the_task_s_link_to_its_job(
    runs: Runs, api: AirflowApi, dev_cluster: DevCluster, airflow_namespace: str
) -> None:
    run_id = runs.trigger("kt_single", seconds=1)
    assert runs.wait("kt_single", run_id) == "success", runs.logs("kt_single", run_id)
    result = api.xcom("kt_single", run_id, "train")
    links = api.links("kt_single", run_id, "train")
    state = dev_cluster.load_state()
    assert state is not None
    expected = (
        f"{state.server}/apis/kubeflow.org/v1/namespaces/{airflow_namespace}/pytorchjobs/{result['name']}"
    )
    assert links == {"Training job": expected}
    # On the dev cluster the job's page is the object in the API server: it is the task's job.
    request = urllib.request.Request(expected)
    request.add_header("Authorization", f"Bearer {dev_cluster.pki.token('admin')}")
    context = ssl.create_default_context(cafile=str(dev_cluster.pki.ca_cert))
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        assert json.loads(response.read())["metadata"]["uid"] == result["uid"]


async def test_a_pod_on_the_process_node_cannot_log_in_to_the_deployment_s_postgres(
    deployment: AirflowDeployment, core: k8s.CoreV1Api, namespace: str
) -> None:
    """Postgres takes password logins only (docs/security.md): a pod on the process node that reaches
    its port is asked for the deployment's generated password, not let in as the superuser."""
    state = deployment.load_state()
    assert state is not None
    outcomes = await ways_in_from_a_pod(core, namespace, {"POSTGRES": f"127.0.0.1:{state.ports['postgres']}"})
    assert not reached(outcomes), f"a pod on the process node reached: {reached(outcomes)}"
    assert "asked for a password" in outcomes["the Airflow deployment's Postgres"], outcomes
