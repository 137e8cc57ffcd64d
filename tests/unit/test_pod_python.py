"""Which Python the process node's pods run with (``devcluster/processnode/interpreter.py``): never
the one that happened to start the cluster when it cannot train."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kubetrain.devcluster.errors import DevClusterError
from kubetrain.devcluster.processnode import interpreter


def test_the_first_candidate_with_the_training_modules_is_chosen() -> None:
    airflow, trainer = "/envs/airflow/bin/python", "/repo/.venv/bin/python"
    choice = interpreter.choose(None, [airflow, trainer], usable=lambda p: p == trainer)
    assert choice == interpreter.Choice(trainer)


def test_without_one_the_first_is_kept_and_the_warning_says_how_to_fix_it() -> None:
    choice = interpreter.choose(None, ["/envs/airflow/bin/python"], usable=lambda _: False)
    assert choice.python == "/envs/airflow/bin/python"
    assert "torch, kubetrain" in choice.warning and "--pod-python" in choice.warning


def test_an_interpreter_given_is_used_and_one_that_cannot_train_is_named(tmp_path: Path) -> None:
    assert interpreter.choose(sys.executable, [], usable=lambda _: True) == interpreter.Choice(sys.executable)
    warned = interpreter.choose(sys.executable, [], usable=lambda _: False)
    assert warned.python == sys.executable and "training pods will fail" in warned.warning
    with pytest.raises(DevClusterError, match=r"--pod-python .*no such executable"):
        interpreter.choose(str(tmp_path / "python"), [], usable=lambda _: True)


def test_the_probe_reads_what_an_interpreter_can_import(tmp_path: Path) -> None:
    here = all(importlib.util.find_spec(m) for m in interpreter.TRAINING_MODULES)
    assert interpreter.has_training_modules(sys.executable) == here
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    assert not interpreter.has_training_modules(str(fake))
    assert not interpreter.has_training_modules(str(tmp_path / "missing"))


def test_the_candidates_are_this_interpreter_then_the_venvs_that_exist(tmp_path: Path) -> None:
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    found = interpreter.candidates(tmp_path)
    assert found[0] == sys.executable and str(venv / "python") in found
    assert len(found) == len(set(found))
