"""Tables never cut a value: plain columns through a pipe, a rich table at its natural width on a
terminal (``kubetrain.tabular``)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from kubetrain import jobs_cli
from kubetrain.tabular import Grid, show

LONG = "a-training-job-with-a-name-as-long-as-teams-give-them"


def grid() -> Grid:
    table = Grid(("NAMESPACE", "NAME", "STATE"), title="jobs")
    table.add_row("team-with-a-long-namespace", LONG, Text("Running", style="cyan"))
    table.add_row("b", "short", "Failed")
    return table


def printed(*, terminal: bool, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=width, color_system=None)
    show(console, grid())
    return out.getvalue()


def test_through_a_pipe_the_columns_are_plain_aligned_and_whole_at_any_width() -> None:
    text = printed(terminal=False, width=40)
    assert text.splitlines() == [
        "jobs",
        "NAMESPACE                    NAME                                                    STATE",
        f"team-with-a-long-namespace   {LONG}   Running",
        f"b                            short{' ' * (len(LONG) - 5)}   Failed",
    ]
    assert [line.split()[1] for line in text.splitlines()[2:]] == [LONG, "short"], "awk '{print $2}'"


def test_on_a_narrow_terminal_the_table_keeps_its_width_and_cuts_nothing() -> None:
    text = printed(terminal=True, width=40)
    assert LONG in text and "team-with-a-long-namespace" in text and "…" not in text


def test_a_row_must_fill_every_column() -> None:
    table = Grid(("A", "B"))
    try:
        table.add_row("only one")
    except ValueError as exc:
        assert "1 cells for 2 columns" in str(exc)
    else:
        raise AssertionError("a short row was taken")


def test_the_jobs_table_names_a_failed_job_and_its_counts_whole() -> None:
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": LONG, "namespace": "team", "annotations": {}},
        "status": {
            "conditions": [{"type": "Failed", "status": "True"}],
            "replicaStatuses": {"Master": {"failed": 1}, "Worker": {"failed": 2}},
            "restartCount": 3,
        },
    }
    text = jobs_cli.jobs_table([job], namespaces=True, wide=True).plain()
    _, row = text.splitlines()
    assert row.split()[:5] == ["team", "PyTorchJob", LONG, "Failed", "Master:0/0/1,Worker:0/0/2"]
    assert row.split()[-2:] == ["3", "-"], "RESTARTS and REPORTED"
    assert jobs_cli.resource_name(job) == f"pytorchjob.kubeflow.org/{LONG}"
