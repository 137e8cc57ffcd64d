"""The ``kubetrain`` command: one entry point for the dev cluster, the controller and jobs.

``kubernetes_asyncio`` is imported the lean way (``kubetrain.kube.lean``) before any command module:
its generated API then loads only when a command uses it, which ``kubetrain controller run`` never
does, so the controller's process (the image's entry point) does without those 859 modules.
"""

from __future__ import annotations

from kubetrain.kube import lean

lean.load()

import typer  # noqa: E402

from kubetrain import jobs_cli  # noqa: E402
from kubetrain.controller.cli import app as controller_app  # noqa: E402
from kubetrain.devcluster.cli import app as dev_app  # noqa: E402

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
