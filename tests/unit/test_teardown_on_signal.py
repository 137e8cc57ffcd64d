"""A test run stopped with SIGTERM (a CI timeout, a supervisor, ``kill``) still tears its fixtures down,
so the processes they started (a cluster, a controller, an Airflow deployment) do not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import conftest

REPO = Path(__file__).resolve().parents[2]
RUN = """
import subprocess, sys, time
from pathlib import Path
import pytest

@pytest.fixture
def server(tmp_path_factory):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    Path({pid_file!r}).write_text(str(child.pid))
    yield
    child.kill()
    child.wait()

def test_long(server):
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for every purpose here.
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


@pytest.mark.parametrize("plugin", [True, False], ids=["with the plugin", "without it"])
def test_sigterm_runs_the_teardown_of_a_fixture_that_started_a_process(tmp_path: Path, plugin: bool) -> None:
    pid_file = tmp_path / "child.pid"
    module = tmp_path / "test_long.py"
    module.write_text(RUN.format(pid_file=str(pid_file)))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module)]
    if plugin:
        argv[3:3] = ["-p", "tests.teardown_on_signal"]
    run = subprocess.Popen(argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    try:
        run.send_signal(signal.SIGTERM)
        run.wait(60)
        assert alive(child) is not plugin, (
            "the fixture's process outlived the run"
            if plugin
            else "without the plugin the teardown ran all the same: this test could not fail"
        )
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_every_test_run_of_the_repository_loads_the_plugin() -> None:
    assert "tests.teardown_on_signal" in conftest.pytest_plugins
