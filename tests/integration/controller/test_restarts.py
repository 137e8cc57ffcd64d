"""Restarts under every restart policy, and backoffLimit counting all of them (reference §4.4, §4.5)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from tests.support import HANG, Jobs, eventually, fails, pytorchjob


def _condition(job: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in job["status"]["conditions"] if c["type"] == ctype)


async def _worker_uid(jobs: Jobs, name: str) -> str:
    pods = await jobs.wait_pods(name, 1)
    return str(pods[0].metadata.uid)


async def _recreated(jobs: Jobs, name: str, old_uid: str) -> str:
    async def probe() -> str | None:
        pods = [p for p in await jobs.pods(name) if p.metadata.name.startswith(f"{name}-worker-0")]
        fresh = [p for p in pods if p.metadata.uid != old_uid and not p.metadata.deletion_timestamp]
        return str(fresh[0].metadata.uid) if fresh else None

    return await eventually(probe, what=f"{name}-worker-0 to be recreated")


async def test_on_failure_recreates_a_failed_pod_and_reports_restarting(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob(
            "onfail",
            master=False,
            workers=1,
            restart_policy="OnFailure",
            worker_annotations=fails(1, after="1s"),
        )
    )
    first = await _worker_uid(jobs, "onfail")
    await _recreated(jobs, "onfail", first)
    job = await jobs.wait_condition("onfail", "Restarting")
    assert _condition(job, "Restarting")["reason"] == "PyTorchJobRestarting"
    assert job["status"]["restartCount"] >= 1
    await jobs.wait_event("onfail", "PyTorchJobRestarting")


async def test_always_restarts_like_on_failure(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob(
            "always",
            master=False,
            workers=1,
            restart_policy="Always",
            worker_annotations=fails(2, after="1s"),
        )
    )
    first = await _worker_uid(jobs, "always")
    await _recreated(jobs, "always", first)
    await jobs.wait_condition("always", "Restarting")


async def test_a_restarted_replica_can_go_on_to_succeed(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob("recovers", master=False, workers=1, worker_annotations=fails(1, after="1s"))
    )
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
        pytorchjob(
            "sigkill",
            master=False,
            workers=1,
            restart_policy="ExitCode",
            worker_annotations=fails(137, after="1s", reason="OOMKilled"),
        )
    )
    first = await _worker_uid(jobs, "sigkill")
    await _recreated(jobs, "sigkill", first)
    job = await jobs.wait_condition("sigkill", "Restarting")
    assert not any(c["type"] == "Failed" for c in job["status"]["conditions"])


async def test_exit_code_policy_fails_the_job_on_codes_below_128(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob(
            "bug", master=False, workers=1, restart_policy="ExitCode", worker_annotations=fails(1, after="1s")
        )
    )
    job = await jobs.wait_condition("bug", "Failed")
    assert "exited with code 1" in _condition(job, "Failed")["message"]
    assert "ExitCode" in _condition(job, "Failed")["message"]


async def test_backoff_limit_counts_recreated_pods(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob(
            "flaky",
            master=False,
            workers=1,
            restart_policy="OnFailure",
            worker_annotations=fails(1, after="0s"),
            run_policy={"backoffLimit": 2},
        )
    )
    job = await jobs.wait_condition("flaky", "Failed", timeout=60)
    failed = _condition(job, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "3 restarts, backoffLimit 2" in failed["message"]
    assert job["status"]["restartCount"] == 3


async def test_backoff_limit_counts_restarts_under_exit_code_too(controller: Any, jobs: Jobs) -> None:
    await jobs.create(
        pytorchjob(
            "evicted",
            master=False,
            workers=1,
            restart_policy="ExitCode",
            worker_annotations=fails(143, after="0s"),
            run_policy={"backoffLimit": 1},
        )
    )
    job = await jobs.wait_condition("evicted", "Failed", timeout=60)
    assert _condition(job, "Failed")["reason"] == "BackoffLimitExceeded"


async def test_in_place_container_restarts_count_against_the_backoff_limit(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    await jobs.create(
        pytorchjob(
            "crashloop", master=False, workers=1, worker_annotations=HANG, run_policy={"backoffLimit": 2}
        )
    )
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
    assert _condition(job, "Failed")["reason"] == "BackoffLimitExceeded"
