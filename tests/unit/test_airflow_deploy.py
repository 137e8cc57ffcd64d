"""What ``kubetrain dev airflow up`` decides before it starts anything: one configuration that every
process shares, and nothing of the caller's Airflow settings leaking into it."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from kubetrain.devcluster import process
from kubetrain.devcluster.airflow_api import AirflowApi
from kubetrain.devcluster.airflow_config import (
    UNSET_ENV,
    Layout,
    Plan,
    Secrets,
    airflow_component,
    airflow_settings,
    postgres_init,
    render_config,
    running_job_query,
    setup_commands,
)

SECRETS = Secrets(
    fernet_key="f" * 44, jwt_secret="jwt", secret_key="key", admin_password="-pw", database_password="db-pw"
)
PORTS = {"postgres": 5001, "api": 5002, "worker-logs": 5003, "trigger-logs": 5004}


def plan(major: int) -> Plan:
    return Plan(
        major=major,
        layout=Layout(Path("/state")),
        dags_folder=Path("/repo/dags"),
        kubeconfig=Path("/cluster/kubeconfig"),
        cluster_server="https://127.0.0.1:6443",
        ports=PORTS,
        secrets=SECRETS,
        namespace="team",
        python="/venv/bin/python",
        cores=2,
    )


@pytest.mark.parametrize("major", [2, 3])
def test_every_process_reads_one_config_with_the_shared_secrets_and_the_local_executor(major: int) -> None:
    parsed = configparser.ConfigParser(interpolation=None)
    parsed.read_string(render_config(airflow_settings(plan(major))))
    assert parsed["core"]["executor"] == "LocalExecutor"
    assert parsed["core"]["parallelism"] == "4"  # twice the cores: more would miss the import timeout
    assert parsed["core"]["fernet_key"] == SECRETS.fernet_key
    assert parsed["core"]["dags_folder"] == "/repo/dags"
    assert parsed["database"]["sql_alchemy_conn"] == (
        "postgresql+psycopg2://postgres:db-pw@127.0.0.1:5001/airflow"
    )
    assert parsed["kubetrain"]["job_url_template"] == (
        "https://127.0.0.1:6443/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}"
    )
    if major >= 3:  # the scheduler signs the tokens the API server checks: one secret for both
        assert parsed["api_auth"]["jwt_secret"] == "jwt"
        assert parsed["core"]["execution_api_server_url"] == "http://127.0.0.1:5002/execution/"
        assert parsed["api"]["port"] == "5002"
    else:  # without it, the 2.11 scheduler would parse DAGs itself beside the DAG processor
        assert parsed["scheduler"]["standalone_dag_processor"] == "True"
        assert parsed["webserver"]["web_server_port"] == "5002"


def test_the_connection_names_the_cluster_s_kubeconfig_and_only_2_11_creates_a_user() -> None:
    three, two = setup_commands(plan(3)), setup_commands(plan(2))
    assert three[0][1:] == ["-m", "airflow", "db", "migrate"]
    assert '{"kube_config_path": "/cluster/kubeconfig"}' in three[1]
    assert [c[3] for c in three] == ["db", "connections"]
    assert [c[3] for c in two] == ["db", "connections", "users"]
    assert "--password=-pw" in two[2], "a password that starts with '-' must not read as an option"


def test_the_caller_s_airflow_settings_do_not_reach_the_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:////tmp/other.db")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", '{"conn_type": "kubernetes"}')
    monkeypatch.setenv("KUBETRAIN_KEEP", "yes")
    triggerer = airflow_component(plan(3), "triggerer", Path("/pg/bin"), since=0)
    env = process.environment(triggerer.env, triggerer.unset_env)
    assert triggerer.unset_env == UNSET_ENV
    assert not any(k.startswith(("AIRFLOW__", "AIRFLOW_CONN_")) for k in env)
    assert env["AIRFLOW_HOME"] == "/state/airflow" and env["KUBETRAIN_NAMESPACE"] == "team"
    assert env["KUBETRAIN_KEEP"] == "yes"


def test_a_process_is_ready_only_by_a_job_row_newer_than_itself() -> None:
    """A triggerer started after one was killed must not be taken for ready by the dead one's row."""
    query = running_job_query("TriggererJob", 1700000000.5)
    assert "job_type = 'TriggererJob'" in query and "state = 'running'" in query
    assert "start_date >= to_timestamp(1700000000.500)" in query
    assert "latest_heartbeat >= now() - interval '60 seconds'" in query


def test_every_task_instance_of_a_run_is_read_past_the_api_s_page_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The REST API serves at most 100 task instances per request; a run of 250 mapped tasks has 250."""
    tis = [{"task_id": "train", "map_index": i} for i in range(250)]
    asked: list[str] = []

    def page(method: str, path: str, body: object = None, *, auth: bool = True) -> dict[str, object]:
        asked.append(path)
        offset = int(path.split("offset=")[1])
        return {"task_instances": tis[offset : offset + 100], "total_entries": len(tis)}

    api = AirflowApi("http://127.0.0.1:1", 3, "admin", "pw")
    monkeypatch.setattr(api, "_send", page)
    assert api.task_instances("kt", "run") == tis
    assert len(asked) == 3


def test_postgres_takes_password_logins_only_with_a_generated_password() -> None:
    """No ``trust`` line in pg_hba.conf: another account on the machine cannot log in as the superuser
    (docs/security.md), and each deployment has a password of its own."""
    argv = postgres_init(Path("/pg/bin"), plan(3))
    assert "--auth=scram-sha-256" in argv and not any("trust" in arg for arg in argv)
    assert "--pwfile=/state/postgres.pwfile" in argv
    assert plan(3).database_url == "postgresql://postgres:db-pw@127.0.0.1:5001/airflow"
    triggerer = airflow_component(plan(3), "triggerer", Path("/pg/bin"), since=0)
    assert isinstance(triggerer.health, process.CommandCheck)
    assert triggerer.health.env["PGPASSWORD"] == "db-pw"
    one, other = Secrets.generate(), Secrets.generate()
    assert len(one.database_password) >= 32 and one.database_password != other.database_password
