"""``kubetrain controller run``: the controller's command line (docs/reference/controller.md)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import sys
from typing import Annotated, Any, get_type_hints

import typer

from kubetrain.controller.options import Options, flags

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


def _flag_parameters() -> list[inspect.Parameter]:
    """``Options``' flag fields as typer parameters: each flag is declared once, in the dataclass."""
    hints = get_type_hints(Options)
    return [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[
                hints[name], typer.Option(*meta["names"], help=meta["help"], **meta["option"])
            ],
        )
        for name, default, meta in flags()
    ]


_scheme = (
    inspect.signature(run_command, eval_str=True)
    .parameters["enable_scheme"]
    .replace(kind=inspect.Parameter.KEYWORD_ONLY)
)
_flags = _flag_parameters()
run_command.__signature__ = inspect.Signature([*_flags[:2], _scheme, *_flags[2:]])  # type: ignore[attr-defined]
app.command("run")(run_command)
