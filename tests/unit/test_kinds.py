"""How the clients (CLI, Airflow, KFP) put a job's state into one line."""

from __future__ import annotations

import json
from typing import Any

from kubetrain import naming
from kubetrain.client.kinds import (
    admission_wait,
    disruption,
    queue_position,
    queued_line,
    report,
    state,
    status_line,
)


def job(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "team"},
        "status": {"conditions": list(conditions), **status},
    }


def condition(ctype: str, status: str = "True", **fields: str) -> dict[str, Any]:
    return {"type": ctype, "status": status, **fields}


def test_pods_the_api_server_forbids_are_in_the_status_line_while_the_controller_retries() -> None:
    waiting = job(
        condition("Created"),
        condition(
            "ReplicaFailure",
            reason="FailedCreate",
            message="cannot create pod mnist-master-0: exceeded quota",
        ),
    )
    assert state(waiting) == "Pending"
    assert status_line(waiting).endswith("cannot create pod mnist-master-0: exceeded quota")
    recovered = job(condition("Created"), condition("Running"))
    assert "cannot create" not in status_line(recovered)


def test_the_line_names_the_state_the_replicas_and_the_restarts() -> None:
    running = job(condition("Running"), replicaStatuses={"Worker": {"active": 2}}, restartCount=1)
    assert status_line(running) == "PyTorchJob team/mnist: Running; Worker active 2; restarts 1"
    preempted = job(condition("Running"), restartCount=1, disruptions=2)
    assert status_line(preempted).endswith("; disruptions 2 (preempted, evicted or drained; not failures)")
    costly = job(condition("Running"), disruptions=1, disruptedGPUSeconds=960)
    assert status_line(costly).endswith(
        "; disruptions 1 (preempted, evicted or drained; not failures; 960 GPU-seconds cut short)"
    )


def test_a_disruption_is_read_from_the_pods_disruption_target_condition() -> None:
    def pod(*conditions: dict[str, str]) -> dict[str, Any]:
        return {"status": {"conditions": list(conditions)}}

    ready = {"type": "Ready", "status": "True"}
    preempted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "team-b/urgent: preempting to accommodate a higher priority pod",
    }
    assert disruption(pod(ready, preempted)) == (
        "PreemptionByScheduler: team-b/urgent: preempting to accommodate a higher priority pod"
    )
    assert disruption(pod({"type": "DisruptionTarget", "status": "True"})) == "DisruptionTarget"
    assert disruption(pod(ready, {**preempted, "status": "False"})) is None
    assert disruption(pod(ready)) is None and disruption({}) is None


def test_a_report_with_metrics_that_are_not_numbers_reads_as_json() -> None:
    """Rank 0 reports a loss of NaN when it had no step left to train (a run resumed from its last
    checkpoint); Airflow's execution API refuses NaN in an XCom, so the task's result must hold none."""
    annotated = job()
    annotated["metadata"]["annotations"] = {
        "kubetrain.dev/training-report": '{"step": 100, "metrics": {"loss": NaN, "ppl": Infinity, '
        '"accuracy": 0.92, "worst": -Infinity}}'
    }
    found = report(annotated)
    assert found["metrics"] == {"loss": None, "ppl": None, "accuracy": 0.92, "worst": None}
    json.dumps(found, allow_nan=False)


def test_a_job_kueue_holds_says_its_queue_and_kueues_reason() -> None:
    held = job(condition("Suspended", reason="JobSuspended"))
    held["metadata"]["labels"] = {naming.LABEL_KUEUE_QUEUE_NAME: "team-a"}
    held["spec"] = {"runPolicy": {"suspend": True}}
    assert status_line(held) == (
        "PyTorchJob team/mnist: Suspended; queued in LocalQueue team-a: waiting for Kueue to admit it"
    )
    why = "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu"
    assert status_line(held, waiting=why).endswith(f"queued in LocalQueue team-a: {why}")
    admitted = {
        **held,
        "spec": {"runPolicy": {"suspend": False}},
        "status": {"conditions": [condition("Running")]},
    }
    assert queued_line(admitted) is None and "queued" not in status_line(admitted, waiting=why)
    unqueued = {**held, "metadata": {"name": "mnist", "namespace": "team"}}
    assert queued_line(unqueued) is None  # suspended by its owner, not by a queue


def test_kueues_reason_is_its_workloads_quota_condition_until_quota_is_reserved() -> None:
    def workload(status: str, message: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "QuotaReserved", "status": status, "message": message}]}}

    assert admission_wait(workload("False", "insufficient quota")) == "insufficient quota"
    assert admission_wait(workload("True", "Quota reserved in ClusterQueue gpus")) is None
    assert admission_wait({"status": {}}) is None  # Kueue has not looked at it yet
    # Where Kueue's visibility API reports the place in the LocalQueue (0: next), the line leads with it.
    assert admission_wait(workload("False", "insufficient quota"), 0) == "position 1; insufficient quota"
    assert admission_wait(workload("True", "Quota reserved"), 3) is None


def test_a_workloads_position_is_read_from_its_local_queues_pending_summary() -> None:
    pending = {
        "kind": "PendingWorkloadsSummary",
        "items": [
            {"metadata": {"name": f"pytorchjob-{n}-1a2b3", "namespace": "team"}, "positionInLocalQueue": i}
            for i, n in enumerate(["big", "small"])
        ],
    }
    assert queue_position(pending, "pytorchjob-small-1a2b3") == 1
    assert queue_position(pending, "pytorchjob-gone-1a2b3") is None  # admitted meanwhile, or past the limit
    assert queue_position({"items": None}, "pytorchjob-small-1a2b3") is None
