"""API chaos: the jobs of the crash storm, with the controller's every request at risk.

Between the controller and the API server the fault proxy answers a share of all requests with 409,
429 (Retry-After), 500 or 503, drops connections, loses the answers of writes that happened, delays
answers, hangs some, cuts watches short and fails lease calls. The controller runs with leader
election and short timings, restarted whenever it exits (as its Deployment would), so losing the
lease is part of the run. Every job must still end as it would without faults.

Size: ``FAULTS_SCALE`` multiplies the number of jobs.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import FaultProxy, Rule
from tests.faults.support import ControllerProcess, elapsed, mix_run, scaled
from tests.support import Jobs

JOBS = scaled(52)  # four of each scenario
CONTROLLER = "controller"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def chaos(proxy: FaultProxy) -> list[Rule]:
    """The faults, by kind of request; the first rule that matches and fires decides."""
    rules = [
        Rule(faultproxy.respond(503), path=r"/leases/", probability=0.05, client=CONTROLLER),
        Rule(faultproxy.hang(2), path=r"/leases/", probability=0.03, client=CONTROLLER),
        Rule(faultproxy.cut(after=3), watch=True, probability=0.15, client=CONTROLLER),
        Rule(faultproxy.hang(4), watch=True, probability=0.05, client=CONTROLLER),
        Rule(faultproxy.respond(500), watch=True, probability=0.05, client=CONTROLLER),
    ]
    for method in WRITES:
        rules += [
            Rule(
                faultproxy.respond(409, reason="Conflict"), method=method, probability=0.04, client=CONTROLLER
            ),
            Rule(faultproxy.respond(429, retry_after=1), method=method, probability=0.04, client=CONTROLLER),
            Rule(faultproxy.respond(503), method=method, probability=0.04, client=CONTROLLER),
            Rule(faultproxy.drop(), method=method, probability=0.03, client=CONTROLLER),
            Rule(faultproxy.lose_response(), method=method, probability=0.04, client=CONTROLLER),
            Rule(faultproxy.delay(0.5), method=method, probability=0.05, client=CONTROLLER),
        ]
    rules += [
        Rule(faultproxy.respond(503), method="GET", watch=False, probability=0.04, client=CONTROLLER),
        Rule(faultproxy.drop(), method="GET", watch=False, probability=0.02, client=CONTROLLER),
        Rule(faultproxy.delay(0.3), method="GET", watch=False, probability=0.05, client=CONTROLLER),
        Rule(faultproxy.hang(3), method="GET", watch=False, probability=0.01, client=CONTROLLER),
    ]
    return [proxy.add(rule) for rule in rules]


@pytest.mark.usefixtures("crds")
async def test_every_job_ends_where_it_should_when_a_share_of_every_request_fails(
    fault_proxy: FaultProxy, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    kubeconfig = fault_proxy.write_kubeconfig(tmp_path / "controller.kubeconfig", client=CONTROLLER)
    lease = f"storm-{namespace}"
    controller = ControllerProcess(
        kubeconfig,
        namespace,
        tmp_path / "controller.log",
        "--leader-elect",
        f"--leader-election-id={lease}",
        f"--leader-election-namespace={namespace}",
        "--leader-election-lease-duration=4",
        "--leader-election-renew-deadline=3",
        "--leader-election-retry-period=0.5",
    )
    rules = chaos(fault_proxy)
    async with mix_run(jobs, JOBS, controller) as run:
        done = asyncio.Event()
        supervisor = asyncio.create_task(controller.supervise(done))
        started = time.monotonic()
        try:
            await run.submit()
            await run.wait_all_ended(timeout=180 + 3 * JOBS)
            ended_at = elapsed(started)
            for rule in rules:
                fault_proxy.remove(rule)  # the verdict and the cleanup run without faults
            faults = Counter(e.fault for e in fault_proxy.exchanges if e.fault is not None)
            await run.judge(
                f"API chaos: {JOBS} jobs, {len(fault_proxy.exchanges)} requests, "
                f"{sum(faults.values())} faults injected ({', '.join(f'{k} {v}' for k, v in faults.most_common())}), "
                f"controller exits {len(controller.exits)}; all ended after {ended_at}",
                controller,
            )
            await run.delete_all_and_wait_gone()
        finally:
            done.set()
            await supervisor
