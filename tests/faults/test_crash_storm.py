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

from tests.faults.support import (
    ControllerProcess,
    PodHistory,
    elapsed,
    kill_storm,
    mix,
    outcome_of,
    plan,
    scaled,
)
from tests.support import Jobs, eventually

JOBS = scaled(104)  # eight of each of the 13 scenarios


@pytest.mark.usefixtures("crds")
async def test_every_job_ends_where_it_should_while_the_controller_is_killed_every_few_seconds(
    kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    scenarios = mix()
    jobs_to_run = plan(JOBS, scenarios)
    history = PodHistory(jobs.core, namespace)
    await history.start()
    controller = ControllerProcess(kubeconfig, namespace, tmp_path / "controller.log")
    controller.start()
    storm_over = asyncio.Event()
    storm = asyncio.create_task(kill_storm(controller, storm_over, every=(2.0, 6.0)))
    started = time.monotonic()
    actors: list[asyncio.Task[object]] = []
    try:
        for scenario in scenarios:
            if scenario.runtime is not None:
                await jobs.create(scenario.runtime)
        await asyncio.gather(*(jobs.create(s.make(name)) for name, s in jobs_to_run))
        actors = [asyncio.create_task(s.act(jobs, name)) for name, s in jobs_to_run if s.act is not None]

        async def all_ended() -> bool:
            ends = await asyncio.gather(*(outcome_of(jobs, n, s.kind) for n, s in jobs_to_run))
            # A job with a TTL has ended once it is gone.
            return all(
                end is not None and (s.outcome.condition is not None or end.condition is None)
                for (_, end), (_, s) in zip(ends, jobs_to_run, strict=True)
            )

        try:
            await eventually(all_ended, timeout=120 + 2 * JOBS, interval=1.0, what="every job to end")
        finally:
            storm_over.set()
            await storm
        ended_at = elapsed(started)
        await asyncio.sleep(3)  # the last controller settles cleanup (failed jobs' pods, TTLs)
        problems: list[str] = []
        for name, scenario in jobs_to_run:
            job, end = await outcome_of(jobs, name, scenario.kind)
            if end != scenario.outcome:
                problems.append(f"{name}: ended {end}, expected {scenario.outcome}")
            problems += scenario.check(job, history, name)
        problems += [f"two live pods for {slot}: {sorted(uids)}" for slot, uids in history.overlaps]
        print(
            f"\ncrash storm: {JOBS} jobs, {controller.kills} SIGKILLs, all ended after {ended_at}; "
            f"pods created {sum(len(u) for u in history.created.values())}, "
            f"duplicates {len(history.overlaps)}, problems {len(problems)}"
        )
        assert not problems, "\n".join(problems[:40]) + "\n" + controller.tail()
    finally:
        for actor in actors:
            actor.cancel()
        storm_over.set()
        controller.stop()

    # Deleting the jobs deletes everything they made (owner references), and no late create
    # of a killed controller's leftover work brings anything back.
    controller = ControllerProcess(kubeconfig, namespace, tmp_path / "controller.log")
    controller.start()
    try:
        for name, scenario in jobs_to_run:
            if scenario.outcome.condition is not None:
                await jobs.delete(name, scenario.kind)

        async def nothing_left() -> bool:
            pods = await jobs.core.list_namespaced_pod(namespace)
            services = await jobs.core.list_namespaced_service(namespace)
            owned = [
                c
                for c in (await jobs.core.list_namespaced_config_map(namespace)).items
                if c.metadata.owner_references
            ]
            return not pods.items and not services.items and not owned

        await eventually(nothing_left, timeout=90, interval=1.0, what="no pods or services left (orphans)")
    finally:
        controller.stop()
        await history.stop()
