"""The API server goes away mid-run and comes back: the controller recovers by itself.

While the job mix runs, the dev cluster's kube-apiserver is stopped for a few seconds and started again
(`kubetrain dev restart`, as the docs show). The controller's watches break, its writes fail, its caches
may be told their resourceVersion is too old; it must reconnect, catch up and drive every job to its end
without creating anything twice.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kubetrain.devcluster import paths
from kubetrain.devcluster.cluster import DevCluster
from tests.docs_commands import run_documented_async, shell_env
from tests.faults.support import ControllerProcess, elapsed, mix_run, scaled
from tests.support import Jobs

JOBS = scaled(26)  # two of each scenario


@pytest.mark.usefixtures("crds")
async def test_every_job_ends_where_it_should_across_an_api_server_restart(
    dev_cluster: DevCluster, kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    controller = ControllerProcess(kubeconfig, namespace, tmp_path / "controller.log")
    async with mix_run(jobs, JOBS, controller) as run:
        started = time.monotonic()
        await run.submit()
        await asyncio.sleep(4)  # mid-run: pods being created, some jobs already finishing
        env = {**shell_env(kubeconfig, namespace, tmp_path), paths.STATE_ENV: str(dev_cluster.state_dir)}
        restart = await run_documented_async(
            "docs/dev-cluster.md", "kubetrain dev restart kube-apiserver", env=env
        )
        assert "Restarted kube-apiserver" in restart.stderr
        await run.wait_all_ended(timeout=180 + 3 * JOBS)
        running = controller.proc is not None and controller.proc.poll() is None
        await run.judge(
            f"API server restart: {JOBS} jobs, all ended after {elapsed(started)}, controller exits "
            f"{0 if running else 1}",
            controller,
        )
        assert controller.proc is not None and controller.proc.poll() is None, "the controller kept running"
        await run.delete_all_and_wait_gone()
