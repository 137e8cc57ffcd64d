"""docs/upstream-sdks.md as written: its two scripts run in a user's shell on the local cluster and print
what the page shows, and its ``pip install`` line is what this environment holds (requirements/sdk.in)."""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.docs_commands import REPO, documented, python_blocks, run_documented

DOC = "docs/upstream-sdks.md"


def _fenced(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", (REPO / DOC).read_text(), re.S | re.M)


def test_the_pip_line_names_the_sdks_this_environment_was_made_with() -> None:
    specs = shlex.split(documented("docs/upstream-sdks.md", "pip install "))[2:]
    lines = (REPO / "requirements" / "sdk.in").read_text().splitlines()
    assert [line for line in lines if line and not line.startswith("#")] == specs
    for spec in map(Requirement, specs):
        assert metadata.version(spec.name) in spec.specifier, spec


@pytest.mark.usefixtures("sdk_cluster", "controller_process")
@pytest.mark.parametrize(
    "command",
    [
        documented("docs/upstream-sdks.md", "python train_v1.py"),
        documented("docs/upstream-sdks.md", "python train_v2.py"),
    ],
)
def test_the_documented_script_prints_what_the_page_shows(
    command: str, shell: dict[str, str], tmp_path: Path
) -> None:
    # Each script is a python block whose first line names it; the text block after it, its output.
    scripts = {block.splitlines()[0].removeprefix("# "): block for block in python_blocks(DOC)}
    outputs = dict(zip(scripts, _fenced("text"), strict=True))
    script = command.removeprefix("python ")
    path = tmp_path / script
    path.write_text(scripts[script])
    done = run_documented(DOC, command, env=shell, replace={command: f"python {path}"}, timeout=600)
    printed = done.stdout.splitlines()
    for line in outputs[script].splitlines():
        pattern = re.escape(line).replace(re.escape("..."), ".*")
        assert any(re.fullmatch(pattern, out) for out in printed), f"{line!r} not in:\n{done.stdout}"
