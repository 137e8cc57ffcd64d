"""The benchmarks' reports, on the figures a tiny run (the integration tests') can produce."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # how the scripts import

import apiserver_write_cost


def test_requests_too_cheap_to_measure_are_reported_without_a_ratio() -> None:
    """A few requests can cost less than one clock tick of the API server's CPU: a zero, not a crash."""
    zero = {
        name: dict.fromkeys(apiserver_write_cost.MEASURED, 0.0) for name in apiserver_write_cost.MEASUREMENTS
    }
    report = apiserver_write_cost.report(zero, 4, 1)
    assert "| Event create | 0.00 | 0.00 | 0.00 | 0.00 | - |" in report, report


def test_ratios_over_rounds_are_taken_within_each_round() -> None:
    """With ``--rounds``, a run is compared with the bare creator's run of its own round (the cluster,
    and so the floor, drifts from one round to the next), and the median of those ratios is reported
    with their range."""
    import controller_throughput as ct

    def run(name: str, round_: int, latency: float, makespan: float) -> ct.Run:
        return ct.Run(
            name, 1, 4, round=round_, latencies=[latency], makespan=makespan, cpu_by_process={"etcd": 1.0}
        )

    runs = [
        run("bare parallel creator", 0, 1.0, 10.0),
        run("bare creator + job objects", 0, 1.2, 10.0),
        run(ct.LEAST, 0, 1.25, 10.0),
        run("kubetrain (unlimited)", 0, 1.5, 10.0),
        run("bare parallel creator", 1, 2.0, 20.0),
        run("bare creator + job objects", 1, 2.4, 20.0),
        run(ct.LEAST, 1, 2.0, 20.0),
        run("kubetrain (unlimited)", 1, 2.2, 22.0),
    ]
    report = ct.report(runs)

    def cells(name: str) -> list[str]:
        row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
        return [c.strip() for c in row.strip("|").split("|")]

    # p95 vs bare: 1.5 and 1.1 within the rounds (the medians' ratio, 1.85 / 1.5, would say 1.23)
    assert cells("kubetrain (unlimited)")[4] == "1.30 (1.10-1.50)", report
    assert cells("kubetrain (unlimited)")[5] == "1.08 (0.92-1.25)", report  # p95 vs bare + jobs
    assert cells("kubetrain (unlimited)")[6] == "1.15 (1.10-1.20)", report  # p95 vs least controller
    assert cells("kubetrain (unlimited)")[8] == "1.05 (1.00-1.10)", report  # makespan vs bare
    # what the job objects cost, and the least controller, against the bare creator of the same round
    assert cells("bare creator + job objects")[4:7] == ["1.20 (1.20-1.20)", "-", "-"], report
    assert cells(ct.LEAST)[4:7] == ["1.12 (1.00-1.25)", "0.94 (0.83-1.04)", "-"], report
    assert cells("bare parallel creator")[4:7] == ["-", "-", "-"], report
    assert report.startswith("Medians of 2 rounds") and "| bare parallel creator #2 |" in report, report


def test_the_cpu_of_the_p95_window_is_reported_by_process_with_how_busy_it_kept_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window the p95 measures, its CPU by process (medians over the rounds) and its total against
    what the cores could give in it: on a machine kept busy, the p95 ratio is the ratio of the CPU
    spent in the window."""
    import controller_throughput as ct

    monkeypatch.setattr(ct.os, "cpu_count", lambda: 2)

    def run(name: str, round_: int, burst: dict[str, float], seconds: float) -> ct.Run:
        return ct.Run(name, 50, 4, round=round_, latencies=[seconds], burst=burst, burst_seconds=seconds)

    runs = [
        run("bare parallel creator", 0, {"kube-apiserver": 0.75, "benchmark": 0.25}, 0.5),
        run("bare parallel creator", 1, {"kube-apiserver": 0.5, "benchmark": 0.25}, 0.5),
        run("kubetrain (unlimited)", 0, {"kube-apiserver": 1.0, "operator": 0.25, "benchmark": 0.0}, 0.75),
        run("kubetrain (unlimited)", 1, {"kube-apiserver": 1.0, "operator": 0.5, "benchmark": 0.0}, 1.0),
        ct.Run("kubetrain (unlimited)", 300, 4, latencies=[1.0]),  # a window never closed: left out
    ]
    lines = ct.burst_report(runs)
    assert lines[1:] == [
        "| configuration | jobs × pods | window (s) | kube-apiserver | benchmark | operator | total "
        "| machine busy (%) |",
        "|---|---|---|---|---|---|---|---|",
        "| bare parallel creator | 50 × 4 | 0.50 (0.50-0.50) | 0.62 | 0.25 | 0.00 | 0.88 (0.75-1.00) "
        "| 88 (75-100) |",
        "| kubetrain (unlimited) | 50 × 4 | 0.88 (0.75-1.00) | 1.00 | 0.00 | 0.38 | 1.38 (1.25-1.50) "
        "| 79 (75-83) |",
    ], lines
    assert "\n".join(lines) in ct.report(runs)
