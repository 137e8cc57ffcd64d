"""The shell commands the docs show, so that tests run them exactly as written.

Every command line in a ``bash``/``sh`` block of README.md or docs/ is *claimed* by the test that runs
it through :func:`run_documented` (or reads it through :func:`documented`);
tests/unit/test_docs.py fails for a command that no test claims and that is not one of the few
commands CI cannot run (listed there with the reason). So a command in the docs either works or
fails a test.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubetrain.devcluster import build

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(bash|sh)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class DocCommand:
    doc: str  # relative to the repository root
    text: str  # the command, its trailing comment removed


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def commands(doc: str | None = None) -> list[DocCommand]:
    paths = [REPO / doc] if doc else doc_files()
    found = []
    for path in paths:
        for match in FENCE.finditer(path.read_text()):
            for line in match.group(2).replace("\\\n", " ").splitlines():
                text = _without_comment(line).strip()
                if text:
                    found.append(DocCommand(str(path.relative_to(REPO)), text))
    return found


def python_blocks(doc: str) -> list[str]:
    """The ``python`` code blocks of ``doc``, for tests that run them."""
    return re.findall(r"^```python\n(.*?)^```", (REPO / doc).read_text(), re.S | re.M)


def documented(doc: str, prefix: str) -> str:
    """The command of ``doc`` that is ``prefix``, else the only one that starts with it."""
    texts = [c.text for c in commands(doc)]
    matches = [prefix] if prefix in texts else [t for t in texts if t.startswith(prefix)]
    if len(matches) != 1:
        listed = "\n  ".join(c.text for c in commands(doc))
        raise LookupError(f"{len(matches)} commands of {doc} start with {prefix!r}; it has:\n  {listed}")
    return matches[0]


def shell_env(kubeconfig: Path, namespace: str, workdir: Path) -> dict[str, str]:
    """A user's shell on the test cluster: `kubectl` and `kubetrain` on PATH, the kubeconfig's
    namespace set to the test's, so commands without ``-n`` land there."""
    config = yaml.safe_load(kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    scoped = workdir / "kubeconfig"
    scoped.write_text(yaml.safe_dump(config))
    path = [str(build.binary_path("kubectl").parent), str(Path(sys.executable).parent), os.environ["PATH"]]
    return {**os.environ, "KUBECONFIG": str(scoped), "PATH": os.pathsep.join(path), "COLUMNS": "200"}


def run_documented(
    doc: str,
    *prefixes: str,
    env: dict[str, str],
    replace: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run the documented commands, one shell from the repository root (so an ``export`` or an
    ``alias`` holds for the lines after it); fail with their output if one fails."""
    text = "\n".join(documented(doc, prefix) for prefix in prefixes)
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    done = subprocess.run(
        ["bash", "-O", "expand_aliases", "-e", "-o", "pipefail", "-c", text],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"{doc}: `{text}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


async def run_documented_async(
    doc: str, *prefixes: str, env: dict[str, str], replace: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """:func:`run_documented` in a thread, for tests whose controller runs on their event loop."""
    return await asyncio.to_thread(run_documented, doc, *prefixes, env=env, replace=replace, timeout=timeout)


def _without_comment(line: str) -> str:
    """The line up to a ``#`` that starts a shell comment (outside quotes, after a blank)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line
