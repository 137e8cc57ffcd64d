"""``python -m kubetrain`` runs the ``kubetrain`` command."""

from kubetrain.cli import main

main()
