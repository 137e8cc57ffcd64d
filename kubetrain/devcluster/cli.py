"""``kubetrain dev``: build, start, inspect and stop the local cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from kubetrain.devcluster import build, paths
from kubetrain.devcluster import controller as dev_controller
from kubetrain.devcluster.airflow_deploy import REPO, AirflowDeployment, AirflowOptions, AirflowStatus
from kubetrain.devcluster.cluster import COMPONENTS, ClusterOptions, ComponentStatus, DevCluster
from kubetrain.devcluster.errors import DevClusterError
from kubetrain.tabular import Grid, show

app = typer.Typer(
    help="The local Kubernetes cluster: real control-plane processes, no Docker.", no_args_is_help=True
)
console = Console(stderr=True)

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir", help=f"State dir of the cluster (default: ${paths.STATE_ENV} or under the cache)."
    ),
]


def _cluster(state_dir: Path | None) -> DevCluster:
    return DevCluster(state_dir or paths.default_state_dir())


def _fail(exc: DevClusterError) -> typer.Exit:
    console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(code=1)


@app.command("build")
def build_command(
    only: Annotated[
        list[str] | None,
        typer.Argument(help=f"Binaries to build (default all: {', '.join(build.BINARIES)})."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when up to date.")] = False,
) -> None:
    """Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, kwok, helm and Kueue from Go modules."""
    try:
        build.build(only=only, force=force, console=console)
    except DevClusterError as exc:
        raise _fail(exc) from None


@app.command("up")
def up_command(
    gpu_nodes: Annotated[int, typer.Option(help="Simulated GPU nodes.")] = 2,
    gpus_per_node: Annotated[int, typer.Option(help="nvidia.com/gpu advertised by each GPU node.")] = 8,
    cpu_nodes: Annotated[int, typer.Option(help="Simulated CPU-only nodes.")] = 1,
    port: Annotated[int | None, typer.Option(help="API server port (default: a free port).")] = None,
    process_node: Annotated[
        bool, typer.Option(help="Run the process node, where pods run as local processes.")
    ] = True,
    process_node_gpus: Annotated[
        int, typer.Option(help="GPUs the process node advertises when the host has none.")
    ] = 0,
    process_node_default: Annotated[
        bool,
        typer.Option(
            "--process-node-default",
            help="Pods that name no node run on the process node for real; simulated nodes take only "
            "pods that tolerate the kubetrain.dev/simulated taint.",
        ),
    ] = False,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Working directory of process-node containers that set none "
            "(default: the current directory)."
        ),
    ] = None,
    kueue: Annotated[
        bool,
        typer.Option(
            "--kueue",
            help="Run Kueue's manager too, with its integrations for every kind kubetrain serves "
            "(docs/kueue.md).",
        ),
    ] = False,
    kueue_pods_ready_timeout: Annotated[
        float | None,
        typer.Option(help="Kueue's waitForPodsReady timeout in seconds (default: off); with --kueue."),
    ] = None,
    kueue_worker_lost_timeout: Annotated[
        float | None,
        typer.Option(
            help="MultiKueue's workerLostTimeout in seconds: how long a manager waits for a lost worker "
            "before dispatching its jobs again (default: Kueue's 15 minutes); with --kueue."
        ),
    ] = None,
    object_store: Annotated[
        bool,
        typer.Option(
            "--object-store",
            help="Run a real S3 server too, with a bucket `kubetrain` (`kubetrain dev object-store` prints "
            "its endpoint and credentials).",
        ),
    ] = False,
    pod_python: Annotated[
        str | None,
        typer.Option(
            envvar="KUBETRAIN_POD_PYTHON",
            help="The Python the process node's pods run with (default: the first of this one, ./.venv "
            "and the kubetrain checkout's .venv that has torch and kubetrain).",
        ),
    ] = None,
    no_build: Annotated[
        bool, typer.Option("--no-build", help="Fail instead of building missing binaries.")
    ] = False,
    state_dir: StateDir = None,
) -> None:
    """Start the cluster and print how to use it."""
    cluster = _cluster(state_dir)
    try:
        if not no_build and not cluster.is_up():
            build.build(console=console)
        state = cluster.up(
            ClusterOptions(
                gpu_nodes=gpu_nodes,
                gpus_per_node=gpus_per_node,
                cpu_nodes=cpu_nodes,
                apiserver_port=port,
                process_node=process_node,
                process_node_gpus=process_node_gpus,
                process_node_default=process_node_default,
                kueue=kueue,
                kueue_pods_ready_timeout=kueue_pods_ready_timeout,
                kueue_worker_lost_timeout=kueue_worker_lost_timeout,
                workdir=str((workdir or Path.cwd()).resolve()),
                pod_python=pod_python,
                object_store=object_store,
            ),
            console=console,
        )
    except DevClusterError as exc:
        raise _fail(exc) from None
    console.print(
        f"\nAPI server: {state.server}\nUse it with:\n\n  export KUBECONFIG={cluster.kubeconfig}\n"
        f"  {build.binary_path('kubectl')} get nodes\n"
    )
    typer.echo(str(cluster.kubeconfig))


@app.command("controller")
def controller_command(state_dir: StateDir = None) -> None:
    """Install kubetrain's CRDs and run its controller for every namespace beside the cluster (once;
    `kubetrain dev logs controller` shows its log, `kubetrain dev down` stops it)."""
    try:
        dev_controller.start(_cluster(state_dir), console=console)
    except DevClusterError as exc:
        raise _fail(exc) from None


@app.command("object-store")
def object_store_command(
    secret: Annotated[
        str | None,
        typer.Option(
            help="Put the credentials into a Secret of this name (in --namespace) instead of printing."
        ),
    ] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The Secret's namespace.")] = "default",
    state_dir: StateDir = None,
) -> None:
    """The S3 server of a cluster started with --object-store: print `export` lines of its endpoint and
    credentials (the variables the AWS SDKs, s3fs and fsspec read), or put them into a Secret for pods."""
    cluster = _cluster(state_dir)
    store = cluster.object_store()
    if store is None or not cluster.is_up():
        raise _fail(
            DevClusterError("no object store: start the cluster with `kubetrain dev up --object-store`")
        )
    if secret is None:
        for name, value in store.env().items():
            typer.echo(f"export {name}={value}")
        return
    try:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(store.secret(secret, namespace)))
    except DevClusterError as exc:
        raise _fail(exc) from None
    console.print(f"Secret {namespace}/{secret} holds the object store's endpoint and credentials")


@app.command("down")
def down_command(state_dir: StateDir = None) -> None:
    """Stop every component and remove the state dir."""
    cluster = _cluster(state_dir)
    if cluster.down():
        console.print(f"Stopped the dev cluster and removed {cluster.state_dir}")
    else:
        console.print("No dev cluster was running.")


@app.command("restart")
def restart_command(
    component: Annotated[str, typer.Argument(help=f"One of: {', '.join(COMPONENTS)}.")],
    down_for: Annotated[float, typer.Option(help="Seconds to leave it stopped.")] = 0.0,
    state_dir: StateDir = None,
) -> None:
    """Stop one component and start it again, as after a crash (to see what clients make of it)."""
    try:
        seconds = _cluster(state_dir).restart(component, down_for=down_for)
    except DevClusterError as exc:
        raise _fail(exc) from None
    console.print(f"Restarted {component}: healthy again after {seconds:.1f}s")


@app.command("status")
def status_command(state_dir: StateDir = None) -> None:
    """Pid, port and health of each component; exits 1 unless all are healthy."""
    cluster = _cluster(state_dir)
    pod_python, store = cluster.pod_python(), cluster.object_store()
    footer = [
        *([f"pods on the process node run with {pod_python}"] if pod_python else []),
        *(
            [f"object store: {store.endpoint}, bucket {store.bucket} (`kubetrain dev object-store`)"]
            if store
            else []
        ),
    ]
    _show_health(
        cluster.status,
        first_column="component",
        title=f"dev cluster ({cluster.state_dir})",
        none_running="No dev cluster is running; start one with `kubetrain dev up`.",
        footer="\n".join(footer) or None,
    )


def _show_health(
    read: Callable[[], Sequence[ComponentStatus] | Sequence[AirflowStatus]],
    *,
    first_column: str,
    title: str,
    none_running: str,
    footer: str | None = None,
) -> None:
    """A table of the rows ``read`` returns, a column per field (the first, the name, headed
    ``first_column``), then ``footer``; exits 1 when there are none or one is unhealthy."""
    try:
        rows = read()
    except DevClusterError as exc:
        raise _fail(exc) from None
    if not rows:
        console.print(none_running)
        raise typer.Exit(code=1)
    columns = [f.name for f in dataclasses.fields(rows[0])]
    grid = Grid((first_column, *columns[1:]), title=title)
    for row in rows:
        grid.add_row(*(_cell(getattr(row, column)) for column in columns))
    out = Console(soft_wrap=True)
    show(out, grid)
    if footer:
        out.print(footer, highlight=False, markup=False)
    if not all(row.healthy for row in rows):
        raise typer.Exit(code=1)


def _cell(value: object) -> str | Text:
    if isinstance(value, bool):
        return Text("yes", style="green") if value else Text("no", style="red")
    return str(value or "-")


@app.command("logs")
def logs_command(
    component: Annotated[
        str, typer.Argument(help=f"One of: {', '.join(COMPONENTS)}, {dev_controller.NAME}.")
    ],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[int, typer.Option(help="Lines from the end to show.")] = 100,
    state_dir: StateDir = None,
) -> None:
    """Print a component's log."""
    cluster = _cluster(state_dir)
    known = (*COMPONENTS, dev_controller.NAME)
    if component not in known:
        raise _fail(DevClusterError(f"unknown component {component!r}; choose from {', '.join(known)}"))
    log = cluster.log_path(component)
    if not log.exists():
        raise _fail(
            DevClusterError(f"no log for {component} at {log}; is the cluster up (`kubetrain dev status`)?")
        )
    argv = ["tail", f"-n{tail}", *(["-F"] if follow else []), str(log)]
    os.execvp(argv[0], argv) if follow else subprocess.run(argv, check=False)


@app.command("openapi")
def openapi_command(
    output: Annotated[
        Path | None, typer.Option(help="Where to write (default: kubetrain/api/k8s-openapi.json).")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 if the file differs instead of writing it.")
    ] = False,
    state_dir: StateDir = None,
) -> None:
    """Refresh the Kubernetes type definitions that the CRD schemas embed, from the running API server."""
    from kubetrain.devcluster import openapi

    target = output or openapi.committed_path()
    rendered = openapi.render(openapi.fetch(_cluster(state_dir)))
    if check:
        if not target.exists() or target.read_text() != rendered:
            console.print(f"[red]{target} differs from the API server's OpenAPI[/]; run `make k8s-openapi`")
            raise typer.Exit(code=1)
        console.print(f"{target} matches the API server's OpenAPI")
        return
    target.write_text(rendered)
    console.print(f"wrote {target}")


# -- kubetrain dev airflow ------------------------------------------------------------------------------
airflow_app = typer.Typer(
    help="A real Airflow deployment beside the cluster: Postgres, API server (webserver on 2.11), "
    "scheduler with the LocalExecutor, DAG processor and triggerer. Run it from an Airflow environment "
    "(.venv-airflow or .venv-airflow2).",
    no_args_is_help=True,
)
app.add_typer(airflow_app, name="airflow")

AIRFLOW_DAGS = REPO / "dags"
AirflowDir = Annotated[
    Path | None,
    typer.Option("--airflow-dir", help="State dir of the deployment (default: airflow/ in the cluster's)."),
]


def _deployment(state_dir: Path | None, airflow_dir: Path | None) -> AirflowDeployment:
    return AirflowDeployment(airflow_dir or (state_dir or paths.default_state_dir()) / "airflow")


@airflow_app.command("up")
def airflow_up_command(
    dags_folder: Annotated[
        Path, typer.Option(help="The DAG folder (default: the repository's dags/).")
    ] = AIRFLOW_DAGS,
    namespace: Annotated[
        str | None,
        typer.Option(help="KUBETRAIN_NAMESPACE of the Airflow processes: where the example DAGs train."),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="The kubeconfig the kubernetes_default connection names (default: the cluster's)."),
    ] = None,
    state_dir: StateDir = None,
    airflow_dir: AirflowDir = None,
) -> None:
    """Start Airflow on Postgres beside the running dev cluster and print how to use it."""
    cluster_dir = state_dir or paths.default_state_dir()
    deployment = _deployment(state_dir, airflow_dir)
    try:
        deployment.up(
            AirflowOptions(
                cluster=str(cluster_dir.resolve()),
                dags_folder=str(dags_folder.resolve()),
                kubeconfig=str(kubeconfig.resolve()) if kubeconfig else None,
                namespace=namespace,
            ),
            console=console,
        )
        api = deployment.api()
    except DevClusterError as exc:
        raise _fail(exc) from None
    console.print(
        f"\nAirflow {api.major}: {api.base_url} (user {api.user}, password {api.password})\n"
        f"Use the CLI with:\n\n  export AIRFLOW_HOME={deployment.layout.home}\n"
    )
    typer.echo(str(deployment.layout.home))


@airflow_app.command("down")
def airflow_down_command(state_dir: StateDir = None, airflow_dir: AirflowDir = None) -> None:
    """Stop every Airflow process and Postgres, and remove the deployment's state dir."""
    deployment = _deployment(state_dir, airflow_dir)
    if deployment.down():
        console.print(f"Stopped Airflow and removed {deployment.root}")
    else:
        console.print("No Airflow deployment was running.")


@airflow_app.command("status")
def airflow_status_command(state_dir: StateDir = None, airflow_dir: AirflowDir = None) -> None:
    """Pid and health of each process; exits 1 unless all are healthy."""
    deployment = _deployment(state_dir, airflow_dir)
    _show_health(
        deployment.status,
        first_column="process",
        title=f"Airflow ({deployment.root})",
        none_running="No Airflow deployment is running; start one with `kubetrain dev airflow up`.",
    )


@airflow_app.command("restart")
def airflow_restart_command(
    component: Annotated[
        str, typer.Argument(help="api-server (webserver), scheduler, dag-processor or triggerer.")
    ],
    kill: Annotated[bool, typer.Option("--kill", help="SIGKILL it at once, as a crash would.")] = False,
    state_dir: StateDir = None,
    airflow_dir: AirflowDir = None,
) -> None:
    """Stop one Airflow process and start a new one, to see what the provider makes of it."""
    try:
        seconds = _deployment(state_dir, airflow_dir).restart(component, kill=kill)
    except DevClusterError as exc:
        raise _fail(exc) from None
    console.print(f"{'Killed' if kill else 'Stopped'} and restarted {component}: ready after {seconds:.1f}s")
