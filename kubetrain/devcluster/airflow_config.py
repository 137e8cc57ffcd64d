"""What a local Airflow deployment runs, decided from the Airflow line, its ports and its paths.

Pure: ``airflow_deploy`` starts what this returns. One ``airflow.cfg`` holds every setting, so the
processes, and a user's shell with ``AIRFLOW_HOME`` set, read the same configuration; the secrets that
must agree across processes (the Fernet key that encrypts connections and trigger kwargs, the JWT
secret of the execution API on Airflow 3, the secret key that signs log requests) are generated once
and written there. Postgres takes only password logins (``scram-sha-256`` on every line of its
``pg_hba.conf``, no ``trust``): the superuser's password is generated with them, and reaches Airflow
in its connection string (``airflow.cfg`` is 0600) and the deployment's own clients through
``PGPASSWORD``, so no other account on the machine logs in.

Airflow 3 runs an API server, a scheduler with the LocalExecutor, a DAG processor and a triggerer;
Airflow 2.11 the same with a webserver instead of the API server (and ``standalone_dag_processor``,
without which its scheduler would parse DAGs itself). The scheduler, DAG processor and triggerer serve
no health endpoint of their own (the scheduler's is optional and only says the scheduler loop runs),
so they are ready when their row in Airflow's ``job`` table says ``running``, as ``airflow
standalone`` decides it too; the row must be newer than the process, so a triggerer started after one
was killed is not taken for ready by the dead one's row.
"""

from __future__ import annotations

import configparser
import io
import json
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kubetrain.devcluster.paths import StateLayout
from kubetrain.devcluster.process import CommandCheck, Component, HealthCheck

# The Airflow processes, in the order they start (and the reverse order they stop).
AIRFLOW3 = ("api-server", "scheduler", "dag-processor", "triggerer")
AIRFLOW2 = ("webserver", "scheduler", "dag-processor", "triggerer")
JOB_TYPES = {"scheduler": "SchedulerJob", "dag-processor": "DagProcessorJob", "triggerer": "TriggererJob"}
PORTS = ("postgres", "api", "worker-logs", "trigger-logs")
# Settings and connections from the caller's environment would override airflow.cfg and the
# database (a shell or a test session with AIRFLOW__DATABASE__SQL_ALCHEMY_CONN set): not inherited.
UNSET_ENV = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")
ADMIN = "admin"
DATABASE = "airflow"
# The job's page on a dev cluster, which has no dashboard: the object in the API server.
API_SERVER_JOB_URL = "{server}/apis/{{group}}/{{version}}/namespaces/{{namespace}}/{{plural}}/{{name}}"


@dataclass(frozen=True)
class Secrets:
    """What every process must share, generated once per deployment."""

    fernet_key: str
    jwt_secret: str
    secret_key: str
    admin_password: str
    database_password: str  # Postgres's superuser's

    @classmethod
    def generate(cls) -> Secrets:
        from cryptography.fernet import Fernet  # a dependency of Airflow itself

        return cls(
            fernet_key=Fernet.generate_key().decode(),
            jwt_secret=secrets.token_urlsafe(32),
            secret_key=secrets.token_urlsafe(32),
            admin_password=secrets.token_urlsafe(12),
            database_password=secrets.token_urlsafe(24),  # URL-safe: it goes in connection strings
        )


@dataclass(frozen=True)
class Layout(StateLayout):
    """Where one deployment keeps everything, all under ``root``."""

    @property
    def home(self) -> Path:
        """AIRFLOW_HOME: airflow.cfg, Airflow's own logs."""
        return self.root / "airflow"

    @property
    def config(self) -> Path:
        return self.home / "airflow.cfg"

    @property
    def pgdata(self) -> Path:
        return self.root / "postgres"

    @property
    def pwfile(self) -> Path:
        """The superuser's password for ``initdb``, there only while it runs."""
        return self.root / "postgres.pwfile"

    @property
    def passwords(self) -> Path:
        """Airflow 3's simple auth manager reads the admin's password from here."""
        return self.home / "simple_auth_manager_passwords.json"


@dataclass(frozen=True)
class Plan:
    """One deployment: the Airflow line, where things are, its ports and secrets."""

    major: int  # 2 or 3
    layout: Layout
    dags_folder: Path
    kubeconfig: Path
    cluster_server: str
    ports: dict[str, int]
    secrets: Secrets
    namespace: str | None = None
    python: str = field(default_factory=lambda: sys.executable)
    cores: int = 2

    @property
    def parallelism(self) -> int:
        """Tries the LocalExecutor runs at once: twice the cores, at least 4. Each try starts by parsing
        its DAG file (Airflow and the provider: seconds of CPU); with more at once on a small machine,
        the starts miss Airflow's 30 s DAG import timeout and are rescheduled."""
        return max(4, 2 * self.cores)

    @property
    def components(self) -> tuple[str, ...]:
        return AIRFLOW3 if self.major >= 3 else AIRFLOW2

    @property
    def web(self) -> str:
        """The process that serves the UI and the REST API."""
        return self.components[0]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def sql_alchemy_conn(self) -> str:
        return f"postgresql+psycopg2://{self._login}@127.0.0.1:{self.ports['postgres']}/{DATABASE}"

    @property
    def database_url(self) -> str:
        """The metadata database, for libpq clients (psql, psycopg2)."""
        return f"postgresql://{self._login}@127.0.0.1:{self.ports['postgres']}/{DATABASE}"

    @property
    def _login(self) -> str:
        return f"postgres:{self.secrets.database_password}"

    @property
    def pg_env(self) -> dict[str, str]:
        """What the deployment's own libpq clients (createdb, psql) log in with."""
        return {"PGPASSWORD": self.secrets.database_password}

    @property
    def connection_extra(self) -> dict[str, str]:
        return {"kube_config_path": str(self.kubeconfig)}

    @property
    def job_url_template(self) -> str:
        return API_SERVER_JOB_URL.format(server=self.cluster_server)


def airflow_settings(plan: Plan) -> dict[str, dict[str, str]]:
    """The sections of ``airflow.cfg``."""
    logs = plan.layout.home / "logs"
    settings: dict[str, dict[str, str]] = {
        "core": {
            "dags_folder": str(plan.dags_folder),
            "executor": "LocalExecutor",
            "load_examples": "False",
            "dags_are_paused_at_creation": "False",
            "fernet_key": plan.secrets.fernet_key,
            "parallelism": str(plan.parallelism),
            "max_active_tasks_per_dag": "256",
        },
        "database": {"sql_alchemy_conn": plan.sql_alchemy_conn},
        "logging": {
            "base_log_folder": str(logs),
            "worker_log_server_port": str(plan.ports["worker-logs"]),
            "trigger_log_server_port": str(plan.ports["trigger-logs"]),
        },
        "kubetrain": {"job_url_template": plan.job_url_template},
    }
    if plan.major >= 3:
        settings["core"].update(
            {
                "auth_manager": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
                "simple_auth_manager_users": f"{ADMIN}:admin",
                "simple_auth_manager_passwords_file": str(plan.layout.passwords),
                "execution_api_server_url": f"{plan.base_url}/execution/",
            }
        )
        settings["api"] = {
            "host": "127.0.0.1",
            "port": str(plan.ports["api"]),
            "base_url": plan.base_url,
            "workers": "1",
            "secret_key": plan.secrets.secret_key,
        }
        settings["api_auth"] = {"jwt_secret": plan.secrets.jwt_secret}
        # DAG files change rarely here; parsing them often costs CPU the tasks need.
        settings["dag_processor"] = {
            "parsing_processes": "1",
            "min_file_process_interval": "120",
            "refresh_interval": "30",
        }
    else:
        settings["webserver"] = {
            "web_server_host": "127.0.0.1",
            "web_server_port": str(plan.ports["api"]),
            "base_url": plan.base_url,
            "workers": "1",
            "secret_key": plan.secrets.secret_key,
            "worker_refresh_batch_size": "0",
        }
        settings["api"] = {
            "auth_backends": "airflow.providers.fab.auth_manager.api.auth.backend.basic_auth",
            "enable_xcom_deserialize_support": "True",
        }
        settings["scheduler"] = {  # parsing as on Airflow 3, above
            "standalone_dag_processor": "True",
            "parsing_processes": "1",
            "min_file_process_interval": "120",
            "dag_dir_list_interval": "30",
        }
    return settings


def render_config(settings: dict[str, dict[str, str]]) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_dict(settings)
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()


def airflow_env(plan: Plan) -> dict[str, str]:
    """The environment of every Airflow process and command."""
    env = {"AIRFLOW_HOME": str(plan.layout.home), "AIRFLOW_CONFIG": str(plan.layout.config)}
    if plan.namespace:
        env["KUBETRAIN_NAMESPACE"] = plan.namespace
    return env


def airflow(plan: Plan, *args: str) -> list[str]:
    return [plan.python, "-m", "airflow", *args]


def setup_commands(plan: Plan) -> list[list[str]]:
    """What runs once, after Postgres is up and before the Airflow processes start."""
    commands = [
        airflow(plan, "db", "migrate"),
        airflow(
            plan,
            "connections",
            "add",
            "kubernetes_default",
            "--conn-type",
            "kubernetes",
            "--conn-extra",
            json.dumps(plan.connection_extra),
        ),
    ]
    if plan.major < 3:  # Airflow 3's simple auth manager reads its passwords file instead
        commands.append(
            airflow(
                plan,
                "users",
                "create",
                "--username",
                ADMIN,
                f"--password={plan.secrets.admin_password}",  # a generated one may start with "-"
                "--role",
                "Admin",
                "--email",
                "admin@example.com",
                "--firstname",
                "Admin",
                "--lastname",
                "User",
            )
        )
    return commands


def postgres_init(pg_bin: Path, plan: Plan) -> list[str]:
    """``initdb`` with password logins only (every line of ``pg_hba.conf``), the superuser's password
    read from ``plan.layout.pwfile``."""
    return [
        str(pg_bin / "initdb"),
        "-D",
        str(plan.layout.pgdata),
        "--auth=scram-sha-256",
        f"--pwfile={plan.layout.pwfile}",
        "--username=postgres",
        "--encoding=UTF8",
        "--no-sync",
    ]


def postgres_createdb(pg_bin: Path, plan: Plan) -> list[str]:
    return [*_pg_client(pg_bin, "createdb", plan), DATABASE]


def _pg_client(pg_bin: Path, tool: str, plan: Plan) -> list[str]:
    return [str(pg_bin / tool), "-h", "127.0.0.1", "-p", str(plan.ports["postgres"]), "-U", "postgres"]


def postgres(pg_bin: Path, plan: Plan, *, user: str | None) -> Component:
    """Postgres on a loopback TCP port (no Unix socket: its path would be limited to 107 bytes);
    durability is traded for speed, as fits a throw-away dev database."""
    return Component(
        "postgres",
        [
            str(pg_bin / "postgres"),
            "-D",
            str(plan.layout.pgdata),
            "-h",
            "127.0.0.1",
            "-p",
            str(plan.ports["postgres"]),
            "-k",
            "",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ],
        CommandCheck(tuple(_pg_client(pg_bin, "pg_isready", plan)), "accepting connections"),
        plan.ports["postgres"],
        startup_timeout=30,
        user=user,
    )


def running_job_query(job_type: str, since: float) -> str:
    """SQL that prints ``ready`` while a process of ``job_type`` started after ``since`` (a Unix time)
    runs: its row in Airflow's ``job`` table, with a heartbeat of the last minute."""
    return (
        f"select 'ready' from job where job_type = '{job_type}' and state = 'running' "
        f"and start_date >= to_timestamp({since:.3f}) "
        "and latest_heartbeat >= now() - interval '60 seconds' limit 1"
    )


def airflow_component(plan: Plan, name: str, pg_bin: Path, *, since: float) -> Component:
    """One Airflow process, with the probe that tells it is ready."""
    env = airflow_env(plan)
    if name in ("api-server", "webserver"):
        if name == "api-server":
            argv = airflow(plan, "api-server", "--host", "127.0.0.1", "--port", str(plan.ports["api"]))
            health = f"{plan.base_url}/api/v2/monitor/health"
        else:
            argv = airflow(plan, "webserver", "--hostname", "127.0.0.1", "--port", str(plan.ports["api"]))
            health = f"{plan.base_url}/health"
        return Component(
            name,
            argv,
            HealthCheck(health),
            plan.ports["api"],
            env=env,
            startup_timeout=180,
            unset_env=UNSET_ENV,
        )
    query = running_job_query(JOB_TYPES[name], since)
    check = CommandCheck(
        (*_pg_client(pg_bin, "psql", plan), "-d", DATABASE, "-tAc", query),
        "ready",
        env={"PGCONNECT_TIMEOUT": "2", **plan.pg_env},
    )
    return Component(name, airflow(plan, name), check, 0, env=env, startup_timeout=180, unset_env=UNSET_ENV)
