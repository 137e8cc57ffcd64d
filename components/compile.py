"""Compile the launcher components to the YAML files committed under ``components/``.

    python -m kubetrain.components.compile [DIR]

Pipelines load them with ``kfp.components.load_component_from_file`` (or
``load_component_from_url``) without installing kubetrain; a test fails when
the committed files differ from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kfp import compiler

from kubetrain.components import launchers

COMPONENTS = {
    "pytorchjob_launcher.yaml": launchers.pytorchjob_launcher,
    "trainjob_launcher.yaml": launchers.trainjob_launcher,
}


def compile_all(directory: Path) -> list[Path]:
    written = []
    for filename, component in COMPONENTS.items():
        path = directory / filename
        compiler.Compiler().compile(component, str(path))
        written.append(path)
    return written


def main() -> None:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    for path in compile_all(directory):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
