"""``kubetrain controller run``: the controller's command line (docs/reference/controller.md)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Annotated

import typer

app = typer.Typer(help="The kubetrain controller.", no_args_is_help=True)


@app.command("run")
def run_command(
    kubeconfig: Annotated[
        str | None, typer.Option(help="Kubeconfig (default: in-cluster, then $KUBECONFIG).")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="Watch one namespace only (default: all).")] = None,
    enable_scheme: Annotated[
        list[str] | None,
        typer.Option(
            "--enable-scheme",
            help="Job kinds to reconcile, repeatable, case-insensitive (default: all installed).",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", "--controller-threads", min=1, help="Concurrent reconciles per kind.")
    ] = 4,
    kube_api_qps: Annotated[
        float, typer.Option(help="Client-side request rate limit for each API kind (0 disables).")
    ] = 50.0,
    kube_api_burst: Annotated[int, typer.Option(help="Client-side burst above the rate limit.")] = 100,
    leader_elect: Annotated[bool, typer.Option(help="Elect a leader through a Lease before acting.")] = False,
    leader_election_id: Annotated[str, typer.Option(help="Name of the Lease.")] = "kubetrain-controller",
    leader_election_namespace: Annotated[
        str, typer.Option(help="Namespace of the Lease.")
    ] = "kubetrain-system",
    leader_election_lease_duration: Annotated[
        float, typer.Option(help="Seconds a follower waits, from when it saw the last renew, to take over.")
    ] = 15.0,
    leader_election_renew_deadline: Annotated[
        float, typer.Option(help="Seconds the leader may go without a successful renew before it exits.")
    ] = 10.0,
    leader_election_retry_period: Annotated[
        float, typer.Option(help="Seconds between tries to acquire or renew the Lease.")
    ] = 2.0,
    metrics_bind_address: Annotated[str, typer.Option(help="Serve /metrics here ('0' disables).")] = ":8080",
    health_probe_bind_address: Annotated[
        str, typer.Option(help="Serve /healthz and /readyz here ('0' disables).")
    ] = ":8081",
    gang_scheduler_name: Annotated[
        str,
        typer.Option(
            help="Gang scheduling: 'kubernetes' (native PodGroup), 'volcano', or a scheduler-plugins scheduler name."
        ),
    ] = "",
    managed_by: Annotated[
        str,
        typer.Option(
            help="'compatible': reconcile jobs with no managedBy or the upstream value too (drop-in replacement); "
            "'kubetrain': only jobs with managedBy kubetrain.dev/controller (run beside the upstream operator)."
        ),
    ] = "compatible",
    pytorch_init_container: Annotated[
        bool, typer.Option(help="Add the master-wait init container to PyTorch Workers.")
    ] = False,
    pytorch_init_container_image: Annotated[
        str, typer.Option(help="Image of the master-wait init container.")
    ] = "alpine:3.10",
    pytorch_init_container_max_tries: Annotated[
        int, typer.Option(help="DNS lookups before the init container gives up.")
    ] = 100,
    watch_timeout: Annotated[int, typer.Option(help="Seconds a watch runs before it is renewed.")] = 300,
    log_format: Annotated[str, typer.Option(help="text or json.")] = "text",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    status_server_bind_address: Annotated[
        str, typer.Option(help="Serve training pods' progress reports (HTTPS) here ('0' disables).")
    ] = "0",
    status_server_url: Annotated[
        str,
        typer.Option(
            help="Base URL pods reach the status server at "
            "(default: https://kubetrain-controller.<leader-election-namespace>.svc:<port>)."
        ),
    ] = "",
    status_server_cert_dir: Annotated[
        str, typer.Option(help="tls.crt, tls.key and ca.crt of the status server (default: a CA of its own).")
    ] = "",
) -> None:
    """Reconcile Kubeflow training jobs into pods until SIGTERM."""
    # Until the event loop takes over SIGTERM, it means "exit cleanly": nothing has started yet.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from kubetrain.api.kinds import JOBS, job_kind
    from kubetrain.controller.main import Options, configure_logging, run
    from kubetrain.kube.leader import LeadershipLostError

    try:
        kinds = tuple(job_kind(k).kind for k in enable_scheme or [k.kind for k in JOBS])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--enable-scheme") from None
    if log_format not in ("text", "json"):
        raise typer.BadParameter("must be text or json", param_hint="--log-format")
    if managed_by not in ("compatible", "kubetrain"):
        raise typer.BadParameter("must be compatible or kubetrain", param_hint="--managed-by")
    options = Options(
        kubeconfig=kubeconfig,
        namespace=namespace,
        kinds=kinds,
        workers=workers,
        kube_api_qps=kube_api_qps,
        kube_api_burst=kube_api_burst,
        leader_elect=leader_elect,
        leader_election_id=leader_election_id,
        leader_election_namespace=leader_election_namespace,
        leader_election_lease_duration=leader_election_lease_duration,
        leader_election_renew_deadline=leader_election_renew_deadline,
        leader_election_retry_period=leader_election_retry_period,
        metrics_bind_address=metrics_bind_address,
        health_probe_bind_address=health_probe_bind_address,
        gang_scheduler_name=gang_scheduler_name,
        managed_by=managed_by,
        pytorch_init_container=pytorch_init_container,
        pytorch_init_container_image=pytorch_init_container_image,
        pytorch_init_container_max_tries=pytorch_init_container_max_tries,
        watch_timeout=watch_timeout,
        log_format=log_format,
        log_level=log_level,
        status_server_bind_address=status_server_bind_address,
        status_server_url=status_server_url,
        status_server_cert_dir=status_server_cert_dir,
    )
    try:
        options.leader_timings()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--leader-election-*") from None
    configure_logging(options)
    # Whatever ends the run early exits 1, so Kubernetes restarts the replica (as a follower).
    try:
        asyncio.run(run(options))
    except LeadershipLostError as exc:
        logging.getLogger("kubetrain.controller").error("exiting: lost the leader lease: %s", exc)
        sys.exit(1)
    except Exception as exc:
        logging.getLogger("kubetrain.controller").error("exiting: %s", exc, exc_info=exc)
        sys.exit(1)
