"""One fault at a time, where it hurts most: the write that matters fails, and the job still ends right.

Each test puts the fault proxy between the controller and the API server and fails one specific call
(the terminal status write, a pod's DELETE, a pod's create) the way a real cluster does now and then.
The verdicts come from what the API server saw: the pods that were created, the status written.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import NAMESPACES
from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import FaultProxy, Rule
from tests.faults.support import PodHistory, v1job
from tests.support import HANG, ControllerHandle, Jobs, eventually, fails, pytorchjob, runs_for

pytestmark = pytest.mark.usefixtures("crds")

StartController = Callable[..., Awaitable[ControllerHandle]]


@pytest.fixture
def proxied_controller(start_controller: StartController, proxied_kubeconfig: Path) -> StartController:
    """Start an in-process controller for the test's namespace that talks through the fault proxy."""
    return functools.partial(start_controller, proxied_kubeconfig)


@pytest.fixture
async def history(core: client.CoreV1Api, namespace: str) -> AsyncIterator[PodHistory]:
    recorder = PodHistory(core, namespace)
    await recorder.start()
    yield recorder
    await recorder.stop()


async def test_a_conflict_on_the_terminal_status_write_never_recreates_the_pods(
    fault_proxy: FaultProxy, proxied_controller: StartController, jobs: Jobs, history: PodHistory
) -> None:
    conflict = fault_proxy.add(
        Rule(
            faultproxy.respond(409, reason="Conflict", message="injected: the object has been modified"),
            method="PATCH",
            path=r"/pytorchjobs/done/status$",
            body="Succeeded",
            times=1,
        )
    )
    await proxied_controller()
    await jobs.create(
        pytorchjob(
            "done",
            workers=2,
            pod_annotations=runs_for("2s"),
            run_policy={"cleanPodPolicy": "All"},
        )
    )
    await jobs.wait_condition("done", "Succeeded", timeout=60)
    assert conflict.fired == 1

    async def cleaned_up() -> bool:
        return not [p for p in await jobs.pods("done") if not p.metadata.deletion_timestamp]

    await eventually(cleaned_up, what="cleanPodPolicy All to delete the pods")
    await asyncio.sleep(2)  # a recreation would come within a pass or two
    created = history.slot_creations("done")
    assert created and all(count == 1 for count in created.values()), f"pods created again: {created}"


def every_try_of_one_delete_fails(fault_proxy: FaultProxy, pod: str) -> Rule:
    """A 503 for every try of the first DELETE of ``pod`` (the client retries five times)."""
    return fault_proxy.add(Rule(faultproxy.respond(503), method="DELETE", path=rf"/pods/{pod}$", times=6))


async def test_a_failed_pod_delete_neither_freezes_the_job_nor_counts_its_restart_twice(
    fault_proxy: FaultProxy, proxied_controller: StartController, jobs: Jobs, history: PodHistory
) -> None:
    unavailable = every_try_of_one_delete_fails(fault_proxy, "flaky-worker-0")
    await proxied_controller()
    await jobs.create(
        pytorchjob(
            "flaky",
            workers=1,
            restart_policy="ExitCode",
            pod_annotations=HANG,
            run_policy={"backoffLimit": 1},
        )
    )
    [worker] = [p for p in await jobs.wait_pods("flaky", 2, phase="Running") if "worker" in p.metadata.name]
    # The kubelet reports the worker OOM-killed: exit code 137 recreates it, one restart.
    await jobs.set_pod_status(
        worker.metadata.name,
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "image": "example.com/train:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        },
    )

    async def replaced() -> client.V1Pod | None:
        pods = [p for p in await jobs.pods("flaky") if p.metadata.name == "flaky-worker-0"]
        fresh = [p for p in pods if p.metadata.uid != worker.metadata.uid and p.status.phase == "Running"]
        return fresh[0] if fresh else None

    # Well within the 300 s for which a raised deletion expectation used to freeze the job.
    await eventually(replaced, timeout=40, what="the failed worker to be replaced")
    assert unavailable.fired == 6
    job = await jobs.get("flaky")
    assert job is not None
    assert job["status"]["restartCount"] == 1, "the failure is counted once, however often it is seen"
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"]["conditions"])
    assert history.slot_creations("flaky")[("flaky", "worker", "0")] == 2


async def test_a_failed_delete_of_a_disrupted_pods_peers_neither_counts_it_twice_nor_leaves_them(
    fault_proxy: FaultProxy, proxied_controller: StartController, jobs: Jobs, history: PodHistory
) -> None:
    # The disruption is counted in the status first, then the running peers are deleted; the first
    # DELETE of the master fails, so the pass ends there.
    unavailable = every_try_of_one_delete_fails(fault_proxy, "evicted-master-0")
    await proxied_controller()
    await jobs.create(pytorchjob("evicted", workers=1, pod_annotations=HANG, run_policy={"backoffLimit": 0}))
    pods = await jobs.wait_pods("evicted", 2, phase="Running")
    master, worker = sorted(pods, key=lambda p: "worker" in p.metadata.name)
    # What the scheduler leaves on a pod it preempts.
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    await jobs.set_pod_status(worker.metadata.name, {"phase": "Failed", "conditions": [disruption]})

    async def both_replaced() -> bool:
        live = {p.metadata.name: p for p in await jobs.pods("evicted") if p.status.phase == "Running"}
        old = {master.metadata.uid, worker.metadata.uid}
        return len(live) == 2 and not old & {p.metadata.uid for p in live.values()}

    await eventually(both_replaced, timeout=60, what="the disrupted worker and its master to be replaced")
    assert unavailable.fired == 6
    job = await jobs.get("evicted")
    assert job is not None
    assert job["status"]["disruptions"] == 1, "the disruption is counted once, however often it is seen"
    assert job["status"].get("restartCount", 0) == 0
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"]["conditions"])
    created = history.slot_creations("evicted")
    assert created[("evicted", "master", "0")] == 2 and created[("evicted", "worker", "0")] == 2, created


async def test_a_pytorchjob_and_a_tfjob_of_one_name_do_not_wait_for_each_others_pods(
    fault_proxy: FaultProxy, proxied_controller: StartController, jobs: Jobs
) -> None:
    # The TFJob's pod create hangs: its expectation stays raised while the call is in flight.
    held = fault_proxy.add(
        Rule(faultproxy.hang(60), method="POST", path=r"/pods$", body='"kind": "TFJob"', times=1)
    )
    await proxied_controller()
    await jobs.create(v1job("TFJob", "shared", {"Worker": (1, HANG)}))
    await eventually(lambda: _fired(held), what="the TFJob's pod create to be held")
    await jobs.create(pytorchjob("shared", workers=0, master_annotations=HANG))
    # One set of expectations per kind: the PyTorchJob's pass is not held back by the TFJob's create.
    await jobs.wait_pods("shared", 1, timeout=15)
    fault_proxy.release()


async def _fired(rule: Rule) -> bool:
    return rule.fired > 0


async def test_pods_the_api_server_refuses_cost_one_request_per_pass(
    fault_proxy: FaultProxy, proxied_controller: StartController, jobs: Jobs
) -> None:
    quota = fault_proxy.add(
        Rule(
            faultproxy.respond(403, reason="Forbidden", message='pods "x" is forbidden: exceeded quota'),
            method="POST",
            path=r"/pods$",
            body='"name": "wide-',
        )
    )
    await proxied_controller()
    await jobs.create(pytorchjob("wide", workers=30, pod_annotations=HANG))
    await jobs.wait_event("wide", "FailedCreatePod")
    await asyncio.sleep(5)
    fault_proxy.remove(quota)
    passes = quota.fired
    # Slow start: each pass stops at its first refused create (31 creates a pass without it).
    assert 1 <= passes <= 20, passes
    await jobs.wait_pods("wide", 31, timeout=60)


async def test_a_409_on_a_delete_is_not_taken_for_done_while_the_pod_is_still_there(
    fault_proxy: FaultProxy, proxied_controller: StartController, jobs: Jobs
) -> None:
    # The first DELETEs of the master pod and its service get a 409; no watch event will come to retry them.
    refused = fault_proxy.add(
        Rule(
            faultproxy.respond(409, reason="Conflict"),
            method="DELETE",
            path=r"/(pods|services)/stray-master-0$",
            times=6,
        )
    )
    await proxied_controller()
    await jobs.create(
        pytorchjob(
            "stray",
            workers=1,
            restart_policy="Never",
            master_annotations=HANG,
            worker_annotations=fails(2, after="1s"),
        )
    )
    await jobs.wait_condition("stray", "Failed", timeout=30)

    async def master_gone() -> bool:
        return not [
            p
            for p in await jobs.pods("stray")
            if "master" in p.metadata.name
            and p.status.phase == "Running"
            and not p.metadata.deletion_timestamp
        ]

    await eventually(master_gone, timeout=30, what="the failed job's running master to be deleted")
    assert refused.fired == 6


async def test_an_answer_cut_off_on_its_way_is_an_api_error_and_the_next_request_goes_through(
    fault_proxy: FaultProxy, proxied_kubeconfig: Path, namespace: str
) -> None:
    """The API server restarts while it answers: the head came, the body stops short. Every loop of the
    controller and the dev cluster catches ``APIError`` and tries again; aiohttp's own error would end
    the loop that met it (the dev cluster's pod finalizer among them, and with it every pod's removal)."""
    fault_proxy.add(Rule(faultproxy.cut(0), method="GET", path=rf"/namespaces/{namespace}$", times=1))
    kube = await KubeClient.from_kubeconfig(str(proxied_kubeconfig))
    try:
        with pytest.raises(errors.APIServerError, match="cut off"):
            await kube.get(NAMESPACES, namespace)
        again = await kube.get(NAMESPACES, namespace)
        assert again is not None and again["metadata"]["name"] == namespace
    finally:
        await kube.close()
