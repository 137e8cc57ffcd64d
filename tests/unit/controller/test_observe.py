"""How pods are read: counts, which failures restart, which fail the job, the training report."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubetrain.controller.core.children import build_pod
from kubetrain.controller.core.observe import NO_EXIT_CODE, fenced_failure, is_retryable, observe
from kubetrain.controller.plugins.gang import gang_scheduler
from kubetrain.controller.plugins.gpu import GpuPlugin, lopsided_gpu_warning
from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.frameworks.base import JobInfo, job_info


def _info(policy: str = "OnFailure", workers: int = 2, gpus: dict[str, int] | None = None) -> JobInfo:
    def replica(rtype: str, count: int) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "pytorch", "image": "img"}
        if gpus and gpus.get(rtype):
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus[rtype])}}
        return {"replicas": count, "restartPolicy": policy, "template": {"spec": {"containers": [container]}}}

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {
            "pytorchReplicaSpecs": {"Master": replica("Master", 1), "Worker": replica("Worker", workers)}
        },
    }
    return job_info(job, frameworks.by_name("PyTorchJob"))


def _pod(
    info: JobInfo,
    rtype: str,
    index: int,
    phase: str,
    *,
    code: int | None = None,
    restarts: int = 0,
    message: str | None = None,
) -> dict[str, Any]:
    pod = build_pod(info, rtype, index, [])
    pod["metadata"]["uid"] = f"uid-{rtype.lower()}-{index}"
    state: dict[str, Any] = {"running": {}}
    if code is not None:
        state = {"terminated": {"exitCode": code, **({"message": message} if message else {})}}
    pod["status"] = {
        "phase": phase,
        "containerStatuses": [{"name": "pytorch", "restartCount": restarts, "state": state}],
    }
    return pod


@pytest.mark.parametrize(
    ("policy", "code", "retry"),
    [
        ("OnFailure", 1, True),
        ("Always", 0, True),
        ("Never", 137, False),
        ("ExitCode", 1, False),
        ("ExitCode", 2, False),
        ("ExitCode", 127, False),
        ("ExitCode", 128, True),
        ("ExitCode", 130, True),
        ("ExitCode", 138, True),
        ("ExitCode", NO_EXIT_CODE, True),
    ],
)
def test_which_failures_restart(policy: str, code: int, retry: bool) -> None:
    assert is_retryable(policy, code) is retry


def test_counts_restarts_and_failures() -> None:
    info = _info("ExitCode", workers=3)
    pods = [
        _pod(info, "Master", 0, "Running", restarts=1),
        _pod(info, "Worker", 0, "Succeeded", code=0),
        _pod(info, "Worker", 1, "Failed", code=137),
        _pod(info, "Worker", 2, "Failed", code=2, restarts=2),
    ]
    obs = observe(info, pods)
    assert obs.counts["Master"].active == 1
    assert (obs.counts["Worker"].succeeded, obs.counts["Worker"].failed) == (1, 2)
    assert [p["metadata"]["name"] for _, p in obs.to_restart] == ["j-worker-1"]
    assert [(t, c) for t, _, c in obs.permanent_failures] == [("Worker", 2)]
    # Per pod: its container restarts, plus one for a failed pod that will be recreated.
    assert obs.pod_failures == {"uid-master-0": 1, "uid-worker-1": 1, "uid-worker-2": 2}


def test_pods_beyond_the_replica_count_and_terminating_pods_are_set_aside() -> None:
    info = _info(workers=1)
    extra = _pod(_info(workers=3), "Worker", 2, "Running")
    leaving = _pod(info, "Worker", 0, "Running")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obs = observe(info, [extra, leaving])
    assert obs.out_of_range == [extra]
    assert obs.terminating == {("Worker", 0)}
    assert obs.pods == {}


def test_the_training_report_is_read_from_rank_zero_only() -> None:
    info = _info()
    report = {"last_checkpoint": "/ckpt/step-10", "step": 10, "metrics": {"accuracy": 0.9}}
    worker = _pod(info, "Worker", 0, "Succeeded", code=0, message=json.dumps({"step": 99}))
    master = _pod(info, "Master", 0, "Succeeded", code=0, message=json.dumps(report))
    assert observe(info, [worker, master]).report == report
    assert observe(info, [worker]).report is None


def test_rank_zero_stopped_with_its_failed_job_still_leaves_its_report() -> None:
    info = _info()
    report = {"last_checkpoint": "/ckpt/step-60", "step": 60}
    master = _pod(info, "Master", 0, "Failed", code=143, message=json.dumps(report))
    master["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert observe(info, [master]).report == report


def test_gpu_pods_get_the_toleration_and_cpu_pods_do_not() -> None:
    info = _info(gpus={"Worker": 1})
    worker = build_pod(info, "Worker", 0, [GpuPlugin()])
    master = build_pod(info, "Master", 0, [GpuPlugin()])
    assert worker["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "tolerations" not in master["spec"]
    assert lopsided_gpu_warning(info) is not None
    assert lopsided_gpu_warning(_info(gpus={"Master": 1, "Worker": 1})) is None


def test_native_pod_group_counts_every_replica() -> None:
    info = _info(workers=3)
    group = gang_scheduler("kubernetes").pod_group(info)
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}


def test_a_container_fenced_off_its_checkpoint_dir_fails_the_job_whatever_the_policy() -> None:
    info = _info("OnFailure", workers=1)
    restarted = _pod(info, "Worker", 0, "Running", restarts=1)
    restarted["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"exitCode": 86}}
    obs = observe(info, [_pod(info, "Master", 0, "Running"), restarted])
    assert obs.fenced == ["j-worker-0"]
    reason, message = fenced_failure("PyTorchJob", "j", obs.fenced) or ("", "")
    assert reason == "Fenced" and "j-worker-0 exited with code 86" in message
    assert observe(info, [_pod(info, "Worker", 0, "Failed", code=1)]).fenced == []
