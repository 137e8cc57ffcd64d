"""The ``kubetrain`` command: one entry point for the dev cluster, the controller and jobs."""

from __future__ import annotations

import typer

from kubetrain import jobs_cli
from kubetrain.controller.cli import app as controller_app
from kubetrain.devcluster.cli import app as dev_app

app = typer.Typer(
    help="Distributed training on Kubernetes, driven from workflow engines.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
jobs_cli.register(app)
app.add_typer(dev_app, name="dev")
app.add_typer(controller_app, name="controller")


def main() -> None:
    """Console-script entry point."""
    app()
