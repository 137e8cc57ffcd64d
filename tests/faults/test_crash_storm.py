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

from tests.faults.support import ControllerProcess, MixRun, PodHistory, elapsed, kill_storm, mix, plan, scaled
from tests.support import Jobs

JOBS = scaled(104)  # eight of each of the 13 scenarios


@pytest.mark.usefixtures("crds")
async def test_every_job_ends_where_it_should_while_the_controller_is_killed_every_few_seconds(
    kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    history = PodHistory(jobs.core, namespace)
    await history.start()
    run = MixRun(jobs, history, plan(JOBS, mix()))
    controller = ControllerProcess(kubeconfig, namespace, tmp_path / "controller.log")
    controller.start()
    storm_over = asyncio.Event()
    storm = asyncio.create_task(kill_storm(controller, storm_over, every=(2.0, 6.0)))
    started = time.monotonic()
    try:
        await run.submit()
        try:
            await run.wait_all_ended(timeout=120 + 2 * JOBS)
        finally:
            storm_over.set()
            await storm
        ended_at = elapsed(started)
        await asyncio.sleep(3)  # the last controller settles cleanup (failed jobs' pods, TTLs)
        problems = await run.problems()
        print(
            f"\ncrash storm: {JOBS} jobs, {controller.kills} SIGKILLs, all ended after {ended_at}; "
            f"pods created {run.pods_created}, duplicates {len(history.overlaps)}, problems {len(problems)}"
        )
        assert not problems, "\n".join(problems[:40]) + "\n" + controller.tail()
        await run.delete_all_and_wait_gone()
    finally:
        run.stop_actors()
        storm_over.set()
        controller.stop()
        await history.stop()
