"""Restarts under every restart policy, and backoffLimit counting all of them (reference §4.4, §4.5)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from tests.support import HANG, Jobs, condition, eventually, fails, lone_worker


async def _worker_is_recreated(jobs: Jobs, name: str) -> None:
    """The job's one worker pod gets a successor: a live pod of the same name with another uid."""
    first = str((await jobs.wait_pods(name, 1))[0].metadata.uid)

    async def recreated() -> bool:
        pods = [p for p in await jobs.live_pods(name) if p.metadata.name.startswith(f"{name}-worker-0")]
        return any(p.metadata.uid != first for p in pods)

    await eventually(recreated, what=f"{name}-worker-0 to be recreated")


async def test_on_failure_recreates_a_failed_pod_and_reports_restarting(controller: Any, jobs: Jobs) -> None:
    await jobs.create(lone_worker("onfail", fails(1, after="1s"), restart_policy="OnFailure"))
    await _worker_is_recreated(jobs, "onfail")
    job = await jobs.wait_condition("onfail", "Restarting")
    assert condition(job, "Restarting")["reason"] == "PyTorchJobRestarting"
    assert job["status"]["restartCount"] >= 1
    await jobs.wait_event("onfail", "PyTorchJobRestarting")


async def test_always_restarts_like_on_failure(controller: Any, jobs: Jobs) -> None:
    await jobs.create(lone_worker("always", fails(2, after="1s"), restart_policy="Always"))
    await _worker_is_recreated(jobs, "always")
    await jobs.wait_condition("always", "Restarting")


async def test_a_restarted_replica_can_go_on_to_succeed(controller: Any, jobs: Jobs) -> None:
    await jobs.create(lone_worker("recovers", fails(1, after="1s")))
    await jobs.wait_condition("recovers", "Restarting")
    template_annotations = {
        "sim.kubetrain.dev/outcome": None,
        "sim.kubetrain.dev/exit-code": None,
        "sim.kubetrain.dev/reason": None,
    }
    await jobs.patch(
        "recovers",
        {
            "spec": {
                "pytorchReplicaSpecs": {
                    "Worker": {"template": {"metadata": {"annotations": template_annotations}}}
                }
            }
        },
    )
    job = await jobs.wait_condition("recovers", "Succeeded")
    assert job["status"]["restartCount"] >= 1


async def test_exit_code_policy_retries_codes_from_128(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        lone_worker("sigkill", fails(137, after="1s", reason="OOMKilled"), restart_policy="ExitCode")
    )
    await _worker_is_recreated(jobs, "sigkill")
    job = await jobs.wait_condition("sigkill", "Restarting")
    assert not any(c["type"] == "Failed" for c in job["status"]["conditions"])


async def test_exit_code_policy_fails_the_job_on_codes_below_128(controller: Any, jobs: Jobs) -> None:
    await jobs.create(lone_worker("bug", fails(1, after="1s"), restart_policy="ExitCode"))
    job = await jobs.wait_condition("bug", "Failed")
    assert "exited with code 1" in condition(job, "Failed")["message"]
    assert "ExitCode" in condition(job, "Failed")["message"]


async def test_backoff_limit_counts_recreated_pods(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        lone_worker("flaky", fails(1, after="0s"), restart_policy="OnFailure", run_policy={"backoffLimit": 2})
    )
    job = await jobs.wait_condition("flaky", "Failed", timeout=60)
    failed = condition(job, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "3 restarts, backoffLimit 2" in failed["message"]
    assert job["status"]["restartCount"] == 3


async def test_backoff_limit_counts_restarts_under_exit_code_too(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        lone_worker(
            "evicted", fails(143, after="0s"), restart_policy="ExitCode", run_policy={"backoffLimit": 1}
        )
    )
    job = await jobs.wait_condition("evicted", "Failed", timeout=60)
    assert condition(job, "Failed")["reason"] == "BackoffLimitExceeded"


async def test_in_place_container_restarts_count_against_the_backoff_limit(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await jobs.create(lone_worker("crashloop", HANG, run_policy={"backoffLimit": 2}))
    await jobs.wait_condition("crashloop", "Running")
    pod = (await jobs.wait_pods("crashloop", 1, phase="Running"))[0]

    async def kubelet_restarted(count: int) -> None:
        # What a kubelet reports after restarting the container in place.
        statuses = [
            {
                "name": "pytorch",
                "image": "example.com/train:1",
                "imageID": "",
                "ready": True,
                "restartCount": count,
                "started": True,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ]
        await core.patch_namespaced_pod_status(
            pod.metadata.name, namespace, {"status": {"containerStatuses": statuses}}
        )

    await kubelet_restarted(1)
    await jobs.wait_event("crashloop", "PyTorchJobRestarting")
    job = await jobs.get("crashloop")
    assert job is not None and job["status"]["restartCount"] == 1
    assert not any(c["type"] == "Failed" for c in job["status"]["conditions"]), (
        "one restart is within the limit"
    )
    await kubelet_restarted(3)
    job = await jobs.wait_condition("crashloop", "Failed")
    assert condition(job, "Failed")["reason"] == "BackoffLimitExceeded"
