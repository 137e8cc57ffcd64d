"""``kubetrain controller run``: the controller's command line (docs/reference/controller.md)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import sys
from dataclasses import fields
from typing import Annotated, Any, get_type_hints

import typer

from kubetrain.controller.options import Options

app = typer.Typer(help="The kubetrain controller.", no_args_is_help=True)


def run_command(
    enable_scheme: Annotated[
        list[str] | None,
        typer.Option(
            "--enable-scheme",
            help="Job kinds to reconcile, repeatable, case-insensitive (default: all installed).",
        ),
    ] = None,
    **values: Any,
) -> None:
    """Reconcile Kubeflow training jobs into pods until SIGTERM."""
    # Until the event loop takes over SIGTERM, it means "exit cleanly": nothing has started yet.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from kubetrain.api.kinds import JOBS, job_kind
    from kubetrain.controller.main import configure_logging, run
    from kubetrain.kube.leader import LeadershipLostError

    try:
        kinds = tuple(job_kind(k).kind for k in enable_scheme or [k.kind for k in JOBS])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--enable-scheme") from None
    options = Options(kinds=kinds, **values)
    if problems := options.problems():
        hint, problem = next(iter(problems.items()))
        raise typer.BadParameter(problem, param_hint=hint)
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


def _parameters() -> list[inspect.Parameter]:
    """The command's parameters, in the order of ``Options``' fields: each flag field as a typer option
    (each flag is declared once, in the dataclass), and ``--enable-scheme`` where ``kinds`` stands."""
    hints = get_type_hints(Options)
    scheme = inspect.signature(run_command, eval_str=True).parameters["enable_scheme"]
    parameters = []
    for f in fields(Options):
        if f.name == "kinds":
            parameters.append(scheme.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        meta = f.metadata
        option = typer.Option(*meta["names"], help=meta["help"], **meta["option"])
        parameters.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default,
                annotation=Annotated[hints[f.name], option],
            )
        )
    return parameters


run_command.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
app.command("run")(run_command)
