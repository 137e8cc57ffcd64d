"""``kubetrain controller run``: its flags are ``Options``' fields, parsed into the ``Options`` it runs with.

``run`` is replaced by one that records its options, so no cluster is needed.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from typer.testing import CliRunner

from kubetrain.cli import app
from kubetrain.controller import main
from kubetrain.controller.options import Options

pytestmark = pytest.mark.unit


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    seen: list[Options] = []

    async def record(options: Options, **_: Any) -> None:
        seen.append(options)

    monkeypatch.setattr(main, "run", record)
    monkeypatch.setattr(main, "configure_logging", lambda _: None)
    return seen


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["controller", "run", *args])


def test_no_flags_run_with_the_defaults_of_options(ran: list[Options]) -> None:
    result = invoke()
    assert result.exit_code == 0, result.output
    assert ran == [Options()]


def test_each_flag_sets_its_field(ran: list[Options]) -> None:
    result = invoke(
        "--controller-threads=8",
        "--kube-api-qps=20",
        "--kube-api-burst=30",
        "--leader-elect",
        "--managed-by=kubetrain",
        "--enable-scheme=pytorchjob",
        "--enable-scheme=TFJob",
        "--status-server-bind-address=:8443",
    )
    assert result.exit_code == 0, result.output
    [options] = ran
    assert (options.workers, options.kube_api_qps, options.kube_api_burst) == (8, 20.0, 30)
    assert options.leader_elect and options.managed_by == "kubetrain"
    assert options.kinds == ("PyTorchJob", "TFJob")
    assert options.status_server_enabled


def test_every_field_but_the_kinds_is_a_flag_with_help() -> None:
    helped = {f.name for f in fields(Options) if f.metadata.get("help")}
    assert helped == {f.name for f in fields(Options)} - {"kinds"}


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--log-format=xml"], "--log-format"),
        (["--managed-by=everyone"], "--managed-by"),
        (["--enable-scheme=MPIJob"], "--enable-scheme"),
        (["--workers=0"], "--workers"),
    ],
)
def test_a_bad_flag_is_refused_by_name_before_anything_runs(
    ran: list[Options], args: list[str], names: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert names in result.output
    assert ran == []
