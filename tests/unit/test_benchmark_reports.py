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
