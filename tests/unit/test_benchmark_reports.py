"""The benchmarks' reports, on the figures a tiny run (the integration tests') can produce."""

from __future__ import annotations

import sys
from pathlib import Path

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
        run("kubetrain (unlimited)", 0, 1.5, 10.0),
        run("bare parallel creator", 1, 2.0, 20.0),
        run("bare creator + job objects", 1, 2.4, 20.0),
        run("kubetrain (unlimited)", 1, 2.2, 22.0),
    ]
    report = ct.report(runs)

    def cells(name: str) -> list[str]:
        row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
        return [c.strip() for c in row.strip("|").split("|")]

    # p95 vs bare: 1.5 and 1.1 within the rounds (the medians' ratio, 1.85 / 1.5, would say 1.23)
    assert cells("kubetrain (unlimited)")[4] == "1.30 (1.10-1.50)", report
    assert cells("kubetrain (unlimited)")[5] == "1.08 (0.92-1.25)", report  # p95 vs bare + jobs
    assert cells("kubetrain (unlimited)")[7] == "1.05 (1.00-1.10)", report  # makespan vs bare
    # what the job objects cost, against the bare creator of the same round
    assert cells("bare creator + job objects")[4:6] == ["1.20 (1.20-1.20)", "-"], report
    assert cells("bare parallel creator")[4:6] == ["-", "-"], report
    assert report.startswith("Medians of 2 rounds") and "| bare parallel creator #2 |" in report, report
