"""The benchmarks run as docs/performance.md shows, at a tiny size.

Their figures are not checked here (performance is measured only by benchmarks/, side by side); what
is checked is that every configuration, the upstream Go operator included, ran every job to the end
and reported what the docs' table is made of, and that every request was priced.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kubetrain.devcluster.cluster import DevCluster
from tests.docs_commands import run_documented

pytestmark = pytest.mark.usefixtures("crds")


def test_the_documented_benchmark_runs_every_configuration(kubeconfig: Path, tmp_path: Path) -> None:
    run_documented(
        "docs/performance.md",
        "KUBETRAIN_BENCH_JOBS=",
        env={**os.environ, "COLUMNS": "200"},
        replace={
            "KUBETRAIN_BENCH_JOBS=50,300": "KUBETRAIN_BENCH_JOBS=2",
            "--rounds 3": "--rounds 1",  # reporting over rounds is tests/unit/test_benchmark_reports.py's
            "controller_throughput.py": f"controller_throughput.py --kubeconfig {kubeconfig} --results {tmp_path}",
        },
        timeout=1800,  # the first run builds the upstream operator
    )
    runs = json.loads((tmp_path / "controller_throughput.json").read_text())
    names = [r["name"].split()[0] for r in runs]
    assert names == ["bare", "bare", "least", "upstream", "kubetrain", "kubetrain"], names
    assert runs[1]["name"] == "bare creator + job objects", runs[1]["name"]
    # 2 jobs of 4 pods: a pod and a service a replica, and each job object for the second
    assert [r["requests"] for r in runs[:2]] == [{"POST": 16}, {"POST": 18}], runs[:2]
    for run in runs:
        assert len(run["latencies"]) == 2 and run["makespan"] > 0, run["name"]
        # the p95 window closed when both jobs had their pods, within the run
        assert 0 < run["burst_seconds"] <= run["makespan"] and "benchmark" in run["burst"], run["name"]
        if not run["name"].startswith("bare"):
            assert run["requests"].get("POST", 0) >= 2 * 8, (
                f"{run['name']} created every child: {run['requests']}"
            )
            assert run["peak_rss_mib"] > 0 and run["rss_by_pods"], run["name"]
    assert runs[0]["cache_mib"]["pods as cached"] < runs[0]["cache_mib"]["pods as sent"]
    assert (tmp_path / "controller_throughput.png").stat().st_size > 0


def test_the_documented_request_cost_benchmark_prices_every_request(tmp_path: Path) -> None:
    """It starts a dev cluster of its own (the CPU it reads is that cluster's processes'), so at a
    tiny size it checks that every measurement ran, the pods that run included, and was reported."""
    run_documented(
        "docs/performance.md",
        ".venv/bin/python benchmarks/apiserver_write_cost.py",
        env={**os.environ, "COLUMNS": "200"},
        replace={
            "apiserver_write_cost.py": f"apiserver_write_cost.py --requests 4 --rounds 1 --settle 0.1 --results {tmp_path}"
        },
        timeout=600,
    )
    found = json.loads((tmp_path / "apiserver_write_cost.json").read_text())
    assert len(found["median"]) == 8 and all(len(r) == 1 for r in found["rounds"].values()), found
    measured = {"kube-apiserver", "etcd", "kube-scheduler", "kwok"}
    assert all(set(cost) == measured for cost in found["median"].values()), found["median"]
    report = (tmp_path / "apiserver_write_cost.md").read_text()
    assert "| PyTorchJob status PATCH, CRD without CEL rules |" in report, report
    assert (tmp_path / "apiserver_write_cost.png").stat().st_size > 0


def test_the_documented_status_server_abuse_benchmark_holds_the_abuse_to_its_budgets(
    kubeconfig: Path, tmp_path: Path
) -> None:
    """At a tiny size, with the two floods (the quiet run adds only time): every job ran in both modes,
    and under abuse the TokenReviews stayed under the budget's cap, the reporter's tight loop got 429 (and
    some reports through), and no random token got anything but 401 or 429."""
    run_documented(
        "docs/performance.md",
        ".venv/bin/python benchmarks/status_server_abuse.py",
        env={**os.environ, "COLUMNS": "200"},
        replace={
            "status_server_abuse.py --rounds 3": (
                f"status_server_abuse.py --kubeconfig {kubeconfig} --jobs 2 --rounds 1 "
                f"--modes elsewhere,abused --results {tmp_path}"
            )
        },
        timeout=600,
    )
    found = json.loads((tmp_path / "status_server_abuse.json").read_text())
    assert [r["mode"] for r in found["runs"]] == ["elsewhere", "abused"]
    assert set(found["figures"]["p50 latency (s)"]) == {"elsewhere", "abused", "abused / elsewhere"}
    assert all(len(r["latencies"]) == 2 for r in found["runs"]), found["runs"]
    (abused,) = (r for r in found["runs"] if r["mode"] == "abused")
    answers = abused["answers"]
    assert answers.get("reporter 429", 0) > 0 and answers.get("reporter 200", 0) > 0, answers
    assert {k for k in answers if k.startswith("random")} <= {"random 401", "random 429"}, answers
    assert abused["token_reviews"] <= found["review_caps"][0], (abused["token_reviews"], found["review_caps"])
    assert (tmp_path / "status_server_abuse.png").stat().st_size > 0


def test_the_documented_checkpoint_benchmark_measures_every_save_and_load(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    """At 1 MB, one round, 1 and 2 ranks, on a directory and on the test cluster's S3 server: every
    measurement ran, for every target and world, and the report names each target met or missed."""
    store = dev_cluster.object_store()
    assert store is not None, "the test cluster has an object store"
    run_documented(
        "docs/performance.md",
        'eval "$(.venv/bin/kubetrain dev object-store)"',
        ".venv/bin/python benchmarks/checkpoint_io.py",
        env={**os.environ, "COLUMNS": "200"},
        replace={
            "kubetrain dev object-store)": f"kubetrain dev object-store --state-dir {dev_cluster.state_dir})",
            "checkpoint_io.py": f"checkpoint_io.py --sizes 1MB --ranks 1,2 --rounds 1 --results {tmp_path}",
        },
        timeout=600,
    )
    found = json.loads((tmp_path / "checkpoint_io.json").read_text())
    runs = found["runs"]
    assert [(r["target"], r["ranks"]) for r in runs] == [("volume", 1), ("volume", 2), ("s3", 1), ("s3", 2)]
    every = {
        "floor",
        "save",
        "save_async_blocked",
        "save_async_commit",
        "sharded",
        "sharded_async_blocked",
        "sharded_async_commit",
        "load",
        "load_sharded",
    }
    for run in runs:
        assert run["size"] == 1_000_000 and run["bytes"] >= run["size"], run
        assert len(run["rounds"]) == 1, run
        expected = every | ({"floor_parallel"} if run["ranks"] > 1 else set())
        assert set(run["median"]) == expected, (run["target"], run["ranks"], sorted(run["median"]))
        assert all(seconds > 0 for seconds in run["median"].values()), run["median"]
        assert {"save_vs_floor", "save_async_blocked_share", "sharded_speedup"} <= set(run["ratios"]), run
    # 1 MB is below the async target's sizes, and no world of 4: only the commit targets apply
    assert {t["target"] for t in found["targets"]} == {
        "commit (sync save) <= 1.2x the raw write",
        "commit (async save, save to committed) <= 1.2x the raw write",
    }, found["targets"]
    assert all(isinstance(t["met"], bool) for t in found["targets"])
    report = (tmp_path / "checkpoint_io.md").read_text()
    assert "## the S3 server" in report and "## Targets" in report, report
    assert (tmp_path / "checkpoint_io.png").stat().st_size > 0
    store_fs = store.filesystem()
    assert not store_fs.exists(f"{store.bucket}/checkpoint-bench/"), "the benchmark deleted what it wrote"
