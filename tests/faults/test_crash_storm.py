"""Crash storm: many jobs of every kind and outcome, while the controller is SIGKILLed over and over.

A killed controller loses everything in memory (caches, expectations, queued work, half-sent writes).
Whatever moment the kill lands, the next one must pick up from what the API server holds and drive
every job to the end it would have reached without faults: no pod twice, no restart counted twice, no
failed job with a training process left, nothing left behind once the jobs are deleted.

Size: ``FAULTS_SCALE`` multiplies the number of jobs (default 1: what ``make test`` runs).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.faults.support import ControllerProcess, elapsed, kill_storm, mix_run, scaled
from tests.support import Jobs

JOBS = scaled(104)  # eight of each of the 13 scenarios


@pytest.mark.usefixtures("crds")
async def test_every_job_ends_where_it_should_while_the_controller_is_killed_every_few_seconds(
    kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    controller = ControllerProcess(kubeconfig, namespace, tmp_path / "controller.log")
    async with mix_run(jobs, JOBS, controller) as run:
        storm_over = asyncio.Event()
        storm = asyncio.create_task(kill_storm(controller, storm_over, every=(2.0, 6.0)))
        started = time.monotonic()
        try:
            await run.submit()
            await run.wait_all_ended(timeout=120 + 2 * JOBS)
        finally:
            storm_over.set()
            await storm
        await run.judge(
            f"crash storm: {JOBS} jobs, {controller.kills} SIGKILLs, all ended after {elapsed(started)}",
            controller,
        )
        await run.delete_all_and_wait_gone()
