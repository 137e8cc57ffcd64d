"""The controller benchmark runs as docs/performance.md shows, at a tiny size, on the test cluster.

Its figures are not checked here (performance is measured only by benchmarks/, side by side); what
is checked is that every configuration, the upstream Go operator included, ran every job to the end
and reported what the docs' table is made of.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.docs_commands import run_documented

pytestmark = pytest.mark.usefixtures("crds")


def test_the_documented_benchmark_runs_every_configuration(kubeconfig: Path, tmp_path: Path) -> None:
    run_documented(
        "docs/performance.md",
        "KUBETRAIN_BENCH_JOBS=",
        env={**os.environ, "COLUMNS": "200"},
        replace={
            "KUBETRAIN_BENCH_JOBS=50,300": "KUBETRAIN_BENCH_JOBS=2",
            "controller_throughput.py": f"controller_throughput.py --kubeconfig {kubeconfig} --results {tmp_path}",
        },
        timeout=1800,  # the first run builds the upstream operator
    )
    runs = json.loads((tmp_path / "controller_throughput.json").read_text())
    names = [r["name"].split()[0] for r in runs]
    assert names == ["bare", "upstream", "kubetrain", "kubetrain"], names
    for run in runs:
        assert len(run["latencies"]) == 2 and run["makespan"] > 0, run["name"]
        if run["name"] != runs[0]["name"]:
            assert run["requests"].get("POST", 0) >= 2 * 8, (
                f"{run['name']} created every child: {run['requests']}"
            )
            assert run["peak_rss_mib"] > 0 and run["rss_by_pods"], run["name"]
    assert runs[0]["cache_mib"]["pods as cached"] < runs[0]["cache_mib"]["pods as sent"]
    assert (tmp_path / "controller_throughput.png").stat().st_size > 0
