"""The lifecycle of a v1 job, pass by pass, on the pure ``decide`` (reference §4.3-§4.7, §7.1, §7.4).

Each test plays the cluster's part the way a sample-controller test does: it holds the job and its
pods, lets ``decide`` look, applies the decision (the status written, the pods created or deleted) and
moves the pods on by hand. The wiring of those writes to a real API server is tested in
``tests/integration/controller``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from dataclasses import replace
from typing import Any

import pytest

from kubetrain.controller.core.skeleton import Pass
from kubetrain.controller.main import Options
from kubetrain.controller.v1 import decisions as v1
from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.reconciler import V1JobReconciler
from kubetrain.kube.expectations import Expectations
from tests.support import pytorchjob

Obj = dict[str, Any]
T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
SETUP = v1.Setup(frameworks.by_name("PyTorchJob"))
_uids = itertools.count()


class Cluster:
    """One job and its pods, as the caches would hold them after each pass's writes."""

    def __init__(self, manifest: Obj, setup: v1.Setup = SETUP) -> None:
        self.job = {**manifest, "metadata": {**manifest["metadata"], "namespace": "ns", "uid": "job-uid"}}
        self.setup = setup
        self.pods: dict[str, Obj] = {}
        self.services: dict[str, Obj] = {}
        self.now = T0
        self.last: v1.Decision | None = None

    def step(self, seconds: float = 1.0, *, failing: frozenset[str] = frozenset()) -> v1.Decision:
        """One pass, ``seconds`` after the last; its writes applied (new pods start Pending), except the
        deletes of the pods named in ``failing``: as in the reconciler, the pass ends with those."""
        self.now += dt.timedelta(seconds=seconds)
        d = v1.decide(
            self.job,
            v1.Observed(list(self.pods.values()), list(self.services.values())),
            self.now,
            self.setup,
        )
        self.job = {**self.job, "status": d.status}
        failed = {p["metadata"]["name"] for p in d.delete_pods} & failing
        last = [] if failed else d.delete_pods_last
        for pod in [*d.delete_pods, *last, *d.cleanup_pods]:
            if pod["metadata"]["name"] not in failing:
                self.pods.pop(pod["metadata"]["name"], None)
        if failed:
            self.last = d
            return d
        for service in [*d.delete_services, *d.cleanup_services]:
            self.services.pop(service["metadata"]["name"], None)
        for pod in d.create_pods:
            pod["metadata"]["uid"] = f"pod-{next(_uids)}"
            pod["metadata"]["creationTimestamp"] = v1.rfc3339(self.now)
            pod["status"] = {"phase": "Pending"}
            self.pods[pod["metadata"]["name"]] = pod
        for service in d.create_services:
            self.services[service["metadata"]["name"]] = service
        self.last = d
        return d

    def set(self, pod: str, phase: str, *, code: int | None = None, restarts: int = 0) -> None:
        """What the kubelet reports for ``pod``: its phase, its container's exit code and restarts."""
        state: Obj = {"running": {}} if code is None else {"terminated": {"exitCode": code}}
        container = self.setup.framework.api.default_container
        started = self.pods[pod].get("status", {}).get("startTime") or v1.rfc3339(self.now)
        self.pods[pod]["status"] = {
            "phase": phase,
            "containerStatuses": [{"name": container, "restartCount": restarts, "state": state}],
            **({"startTime": started} if phase != "Pending" else {}),
        }

    def conditions(self) -> list[tuple[str, str, str]]:
        return [(c["type"], c["status"], c["reason"]) for c in self.job["status"]["conditions"]]

    def condition(self, ctype: str) -> Obj:
        return next(c for c in self.job["status"]["conditions"] if c["type"] == ctype)


def running(manifest: Obj, setup: v1.Setup = SETUP) -> Cluster:
    """A job whose pods were created and all run."""
    cluster = Cluster(manifest, setup)
    cluster.step()
    for name in cluster.pods:
        cluster.set(name, "Running")
    cluster.step()
    return cluster


def events(d: v1.Decision) -> list[str]:
    return [e.reason for e in d.events]


# -- creation, running, success, failure -----------------------------------------------------------
def test_a_new_job_is_created_then_running_with_upstreams_conditions_and_selectors() -> None:
    cluster = Cluster(pytorchjob("test-job", workers=1))
    first = cluster.step()
    assert cluster.conditions() == [("Created", "True", "PyTorchJobCreated")]
    assert ("created", 1) in first.counters and "PyTorchJobCreated" in events(first)
    assert sorted(cluster.pods) == ["test-job-master-0", "test-job-worker-0"]
    assert sorted(cluster.services) == ["test-job-master-0", "test-job-worker-0"]
    for name in cluster.pods:
        cluster.set(name, "Running")
    cluster.step()
    assert cluster.conditions() == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "True", "PyTorchJobRunning"),
    ]
    status = cluster.job["status"]
    assert status["startTime"] == "2026-01-01T12:00:01Z"
    assert status["replicaStatuses"]["Worker"] == {
        "active": 1,
        "selector": "training.kubeflow.org/job-name=test-job,training.kubeflow.org/operator-name="
        "pytorchjob-controller,training.kubeflow.org/replica-type=worker",
    }


def test_the_master_succeeding_completes_the_job_and_running_turns_false() -> None:
    cluster = running(pytorchjob("done", workers=2))
    cluster.set("done-master-0", "Succeeded", code=0)
    d = cluster.step()
    assert d.phase is v1.Phase.FINISHING and d.finish is not None and d.finish.counter == "successful"
    status = cluster.job["status"]
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1
    assert status["completionTime"] == "2026-01-01T12:00:03Z"
    assert cluster.conditions()[-1] == ("Succeeded", "True", "PyTorchJobSucceeded")
    assert ("Running", "False", "PyTorchJobRunning") in cluster.conditions()
    assert d.cleanup_pods == [], "cleanPodPolicy None keeps the workers"


def _counts(cluster: Cluster) -> dict[str, Obj]:
    return {
        rtype: {k: v for k, v in entry.items() if k != "selector"}
        for rtype, entry in cluster.job["status"]["replicaStatuses"].items()
    }


def test_a_succeeded_job_counts_its_still_running_replicas_as_succeeded_as_upstream() -> None:
    cluster = running(pytorchjob("fold", workers=2))
    cluster.set("fold-worker-0", "Succeeded", code=0)
    cluster.set("fold-master-0", "Succeeded", code=0)
    cluster.step()
    assert _counts(cluster) == {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}}
    # A job that succeeded with its counts as observed (an earlier controller version) gets them too.
    cluster.job["status"]["replicaStatuses"]["Worker"] = {"active": 1, "succeeded": 1}
    assert cluster.step().phase is v1.Phase.FINISHED
    assert cluster.job["status"]["replicaStatuses"]["Worker"] == {"succeeded": 2}


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("replica", "PyTorchJobFailed"),
        ("backoff", "BackoffLimitExceeded"),
        ("deadline", "DeadlineExceeded"),
    ],
)
def test_a_failed_job_reports_no_active_replica_its_stopped_pods_count_as_failed(
    how: str, reason: str
) -> None:
    run_policy = {"backoffLimit": 0} if how == "backoff" else {}
    if how == "deadline":
        run_policy = {"activeDeadlineSeconds": 60}
    policy = "Never" if how == "replica" else "OnFailure"
    cluster = running(pytorchjob("stop", workers=2, restart_policy=policy, run_policy=run_policy))
    if how == "deadline":
        d = cluster.step(60)
    else:
        cluster.set("stop-worker-1", "Failed", code=3)
        d = cluster.step()
    assert cluster.condition("Failed")["reason"] == reason
    assert sorted(p["metadata"]["name"] for p in d.cleanup_pods) == (
        ["stop-master-0", "stop-worker-0", "stop-worker-1"]
        if how == "deadline"
        else ["stop-master-0", "stop-worker-0"]
    ), "every running pod is stopped"
    assert _counts(cluster) == {"Master": {"failed": 1}, "Worker": {"failed": 2}}, (
        "the stopped pods count as failed, nothing is active"
    )
    # A job that failed with its counts as observed (an earlier controller version) gets them too.
    cluster.job["status"]["replicaStatuses"]["Master"] = {"active": 1}
    assert cluster.step().phase is v1.Phase.FINISHED
    assert _counts(cluster)["Master"] == {"failed": 1}


def test_a_never_policy_worker_failing_fails_the_job_naming_the_pod_and_code() -> None:
    cluster = running(pytorchjob("broken", workers=2, restart_policy="Never"))
    cluster.set("broken-worker-1", "Failed", code=3)
    d = cluster.step()
    failed = cluster.condition("Failed")
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == (
        "PyTorchJob broken has failed because 1 Worker replica(s) failed: broken-worker-1 exited with code 3 "
        "(restartPolicy Never); first failure: Worker 1 (pod broken-worker-1): exit code 3, ExitCode: exited "
        "with code 3"
    )
    assert cluster.conditions()[-1][0] == "Failed"
    assert d.finish is not None and d.finish.counter == "failed"
    assert sorted(p["metadata"]["name"] for p in d.cleanup_pods) == ["broken-master-0", "broken-worker-0"], (
        "a failed job keeps no running pod"
    )


@pytest.mark.parametrize("tail", [True, False], ids=["tail kept", "tail turned off"])
def test_a_secret_in_the_failed_containers_output_never_reaches_the_status(tail: bool) -> None:
    annotations = {} if tail else {"kubetrain.dev/failure-log-tail": "false"}
    cluster = running(pytorchjob("leaky", workers=1, annotations=annotations, run_policy={"backoffLimit": 0}))
    said = (
        "db=postgresql://trainer:hunter2@db/runs\nTraceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\nValueError: bad token=abcd1234efgh'
    )
    cluster.set("leaky-worker-0", "Failed", code=1)
    terminated = cluster.pods["leaky-worker-0"]["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated["message"] = said
    d = cluster.step()
    first = cluster.job["status"]["firstFailure"]
    written = json.dumps([cluster.job["status"], [e.message for e in d.events]])
    assert "hunter2" not in written and "abcd1234efgh" not in written
    assert first["summary"] == "ValueError: bad token=***"
    assert ("logTail" in first) is tail


def test_a_failed_job_names_the_replica_that_failed_first_with_its_category_and_log_tail() -> None:
    cluster = running(pytorchjob("oom", workers=2, run_policy={"backoffLimit": 0}))
    traceback = "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB"
    cluster.set("oom-master-0", "Failed", code=1)
    cluster.set("oom-worker-1", "Failed", code=1)
    for name, at, text in [
        ("oom-master-0", "2026-01-01T12:00:09Z", "NCCL timeout waiting for rank 2"),
        ("oom-worker-1", "2026-01-01T12:00:05Z", traceback),
    ]:
        terminated = cluster.pods[name]["status"]["containerStatuses"][0]["state"]["terminated"]
        terminated.update(finishedAt=at, message=text)
        cluster.pods[name]["spec"]["nodeName"] = "gpu-3"
    cluster.step()
    failed = cluster.condition("Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].endswith(
        "; first failure: Worker 1 (pod oom-worker-1 on node gpu-3 at 2026-01-01T12:00:05Z): exit code 1, "
        "GPUOutOfMemory: torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB"
    )
    first = cluster.job["status"]["firstFailure"]
    assert (first["replicaType"], first["index"], first["category"]) == ("Worker", 1, "GPUOutOfMemory")
    assert first["logTail"] == traceback


def test_master_success_wins_over_a_worker_failure_seen_together() -> None:
    cluster = running(pytorchjob("race", workers=1, restart_policy="Never"))
    cluster.set("race-master-0", "Succeeded", code=0)
    cluster.set("race-worker-0", "Failed", code=1)
    cluster.step()
    assert cluster.conditions()[-1][0] == "Succeeded"


def test_a_finished_job_is_left_finished_whatever_its_pods_do() -> None:
    cluster = running(pytorchjob("over", workers=1, restart_policy="Never"))
    cluster.set("over-master-0", "Succeeded", code=0)
    cluster.step()
    cluster.set("over-worker-0", "Failed", code=1)
    d = cluster.step()
    assert d.phase is v1.Phase.FINISHED and d.create_pods == [] and d.finish is None
    assert cluster.conditions()[-1][0] == "Succeeded"


# -- restarts ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_a_failed_pod_is_deleted_after_its_restart_is_counted_then_recreated(policy: str) -> None:
    cluster = running(pytorchjob("onfail", master=False, workers=1, restart_policy=policy))
    cluster.set("onfail-worker-0", "Failed", code=1)
    d = cluster.step()
    assert [p["metadata"]["name"] for p in d.delete_pods] == ["onfail-worker-0"]
    assert d.status["restartCount"] == 1 and ("restarted", 1) in d.counters
    assert cluster.condition("Restarting")["reason"] == "PyTorchJobRestarting"
    assert "PyTorchJobRestarting" in events(d)
    assert cluster.conditions()[-1][0] == "Restarting" and "Running" not in [
        c[0] for c in cluster.conditions()
    ]
    again = cluster.step()
    assert [p["metadata"]["name"] for p in again.create_pods] == ["onfail-worker-0"]


def test_a_restarted_replica_can_go_on_to_succeed() -> None:
    cluster = running(pytorchjob("recovers", master=False, workers=1))
    cluster.set("recovers-worker-0", "Failed", code=1)
    cluster.step()
    cluster.step()
    cluster.set("recovers-worker-0", "Succeeded", code=0)
    cluster.step()
    assert cluster.conditions()[-1][0] == "Succeeded"
    assert cluster.job["status"]["restartCount"] == 1


def test_exit_code_policy_retries_codes_from_128_and_fails_on_lower_ones() -> None:
    retried = running(pytorchjob("sigkill", master=False, workers=1, restart_policy="ExitCode"))
    retried.set("sigkill-worker-0", "Failed", code=137)
    retried.step()
    assert retried.conditions()[-1][0] == "Restarting" and "Failed" not in [
        c[0] for c in retried.conditions()
    ]
    bug = running(pytorchjob("bug", master=False, workers=1, restart_policy="ExitCode"))
    bug.set("bug-worker-0", "Failed", code=1)
    bug.step()
    assert "exited with code 1" in bug.condition("Failed")["message"]
    assert "ExitCode" in bug.condition("Failed")["message"]


@pytest.mark.parametrize(("policy", "code"), [("OnFailure", 1), ("ExitCode", 143)])
def test_the_backoff_limit_counts_every_recreated_pod_once(policy: str, code: int) -> None:
    cluster = running(
        pytorchjob("flaky", master=False, workers=1, restart_policy=policy, run_policy={"backoffLimit": 2})
    )
    for _ in range(3):
        cluster.set("flaky-worker-0", "Failed", code=code)
        cluster.step()  # counted, deleted
        cluster.step()  # recreated
        cluster.step()  # a pass that sees nothing new counts nothing
    failed = cluster.condition("Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "3 restarts, backoffLimit 2" in failed["message"]
    assert cluster.job["status"]["restartCount"] == 3


def test_in_place_container_restarts_count_against_the_backoff_limit() -> None:
    cluster = running(pytorchjob("crashloop", master=False, workers=1, run_policy={"backoffLimit": 2}))
    cluster.set("crashloop-worker-0", "Running", restarts=1)
    d = cluster.step()
    assert d.status["restartCount"] == 1 and ("restarted", 1) in d.counters
    assert "Failed" not in [c[0] for c in cluster.conditions()], "one restart is within the limit"
    cluster.step()
    assert cluster.job["status"]["restartCount"] == 1, "the same restart is counted once"
    cluster.set("crashloop-worker-0", "Running", restarts=3)
    cluster.step()
    assert cluster.condition("Failed")["reason"] == "BackoffLimitExceeded"


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_backoff_limit_n_lets_n_restarts_run_and_fails_on_the_next_failure(limit: int) -> None:
    # One more than upstream, which fails the job as its last allowed restart begins (restarts >= limit);
    # docs/job-lifecycle.md says why: the limit means what Kubernetes' Job backoffLimit means.
    cluster = running(pytorchjob("bounded", master=False, workers=1, run_policy={"backoffLimit": limit}))
    for restarts in range(1, limit + 1):
        cluster.set("bounded-worker-0", "Running", restarts=restarts)
        cluster.step()
        assert "Failed" not in [c[0] for c in cluster.conditions()], f"restart {restarts} of {limit} allowed"
    cluster.set("bounded-worker-0", "Running", restarts=limit + 1)
    cluster.step()
    assert cluster.condition("Failed")["reason"] == "BackoffLimitExceeded"
    assert f"{limit + 1} restarts, backoffLimit {limit}" in cluster.condition("Failed")["message"]


def test_a_crash_looping_on_failure_pod_keeps_the_job_running_as_upstream_does() -> None:
    # The kubeflow-training SDK's is_job_running() reads the latest condition: it must not flicker.
    cluster = running(pytorchjob("crashloop", master=False, workers=1))
    for restarts in range(1, 5):
        cluster.set("crashloop-worker-0", "Running", restarts=restarts)
        d = cluster.step()
        assert cluster.conditions()[-1] == ("Running", "True", "PyTorchJobRunning"), restarts
        assert "Restarting" not in [c[0] for c in cluster.conditions()]
        assert "PyTorchJobRestarting" not in events(d)
    assert cluster.job["status"]["restartCount"] == 4, "every restart still counts"


# -- disruptions -------------------------------------------------------------------------------------
def _disrupt(cluster: Cluster, pod: str, *, deleted: bool, reason: str = "EvictionByEvictionAPI") -> None:
    """What the API server does to a pod it evicts (deleted) or the kubelet to one it preempts (Failed)."""
    target = cluster.pods[pod]
    target["status"].setdefault("conditions", []).append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": "Eviction API: evicting",
            "lastTransitionTime": v1.rfc3339(cluster.now),
        }
    )
    if deleted:
        target["metadata"]["deletionTimestamp"] = v1.rfc3339(cluster.now)
    else:
        cluster.set(pod, "Failed", code=137)
        target["status"]["conditions"] = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": reason,
                "lastTransitionTime": v1.rfc3339(cluster.now),
            }
        ]


@pytest.mark.parametrize("policy", ["OnFailure", "Never", "ExitCode"])
def test_a_disrupted_pod_is_recreated_without_counting_a_restart_whatever_its_policy(policy: str) -> None:
    cluster = running(pytorchjob("pre", workers=2, restart_policy=policy, run_policy={"backoffLimit": 0}))
    first_worker = cluster.pods["pre-worker-1"]["metadata"]["uid"]
    _disrupt(cluster, "pre-worker-1", deleted=False, reason="PreemptionByScheduler")
    d = cluster.step()
    assert d.finish is None, d.finish
    assert cluster.job["status"]["disruptions"] == 1 and cluster.job["status"]["restartCount"] == 0
    assert ("disrupted", 1) in d.counters and ("restarted", 1) not in d.counters
    assert "PyTorchJobDisrupted" in events(d) and "PreemptionByScheduler" in d.events[-1].message
    # Its peers, running beside it, go too: they could not go on without it; it goes once they are gone.
    assert sorted(p["metadata"]["name"] for p in d.delete_pods) == ["pre-master-0", "pre-worker-0"]
    assert [p["metadata"]["name"] for p in d.delete_pods_last] == ["pre-worker-1"]
    again = cluster.step()
    assert sorted(cluster.pods) == ["pre-master-0", "pre-worker-0", "pre-worker-1"]
    assert cluster.pods["pre-worker-1"]["metadata"]["uid"] != first_worker
    assert "PyTorchJobDisrupted" not in events(again) and cluster.job["status"]["disruptions"] == 1
    assert "countedDisruptions" not in cluster.job["status"]
    assert not cond_true(cluster, "Restarting")


def test_a_failed_delete_of_a_disrupted_pods_peer_is_retried_and_the_disruption_counted_once() -> None:
    cluster = running(pytorchjob("pre", workers=1, run_policy={"backoffLimit": 0}))
    old_master = cluster.pods["pre-master-0"]["metadata"]["uid"]
    _disrupt(cluster, "pre-worker-0", deleted=False, reason="PreemptionByScheduler")
    cluster.step(failing=frozenset({"pre-master-0"}))
    # The disrupted worker is kept while its master's delete failed: the next pass sees why again.
    assert sorted(cluster.pods) == ["pre-master-0", "pre-worker-0"]
    again = cluster.step()
    assert [p["metadata"]["name"] for p in again.delete_pods] == ["pre-master-0"]
    assert cluster.job["status"]["disruptions"] == 1 and "PyTorchJobDisrupted" not in events(again)
    cluster.step()
    assert sorted(cluster.pods) == ["pre-master-0", "pre-worker-0"]
    assert cluster.pods["pre-master-0"]["metadata"]["uid"] != old_master
    assert cluster.job["status"]["restartCount"] == 0


def test_a_disruption_records_the_gpu_seconds_it_cut_short_once() -> None:
    cluster = running(pytorchjob("gpu", workers=1, gpus=8, run_policy={"backoffLimit": 0}))
    cluster.step(99)  # the master and the worker have run 100 s on 8 GPUs each
    _disrupt(cluster, "gpu-worker-0", deleted=False, reason="PreemptionByScheduler")
    cluster.step(3)  # seen a little later: the disruption's own time counts
    assert cluster.job["status"]["disruptedGPUSeconds"] == 2 * 8 * 100
    again = cluster.step()
    assert cluster.job["status"]["disruptedGPUSeconds"] == 1600 and not any(
        counter == "disrupted" for counter, _ in again.counters
    )  # counted once


def test_an_evicted_pod_is_counted_once_while_it_terminates_and_new_pods_are_left_alone() -> None:
    cluster = running(pytorchjob("ev", workers=1, run_policy={"backoffLimit": 0}))
    _disrupt(cluster, "ev-master-0", deleted=True)
    d = cluster.step()
    assert [p["metadata"]["name"] for p in d.delete_pods] == ["ev-worker-0"]
    assert cluster.job["status"]["disruptions"] == 1
    # The master takes its grace period to save and stop; its worker's replacement is created meanwhile.
    cluster.step(5)
    assert "ev-worker-0" in cluster.pods and "ev-master-0" in cluster.pods
    later = cluster.step(5)
    assert later.delete_pods == [] and cluster.job["status"]["disruptions"] == 1
    del cluster.pods["ev-master-0"]  # gone at last
    cluster.step()
    assert "ev-master-0" in cluster.pods and cluster.job["status"]["restartCount"] == 0
    assert "countedDisruptions" not in cluster.job["status"]


@pytest.mark.parametrize("policy", ["OnFailure", "Never"])
def test_a_peer_that_fails_without_its_evicted_master_before_the_eviction_is_seen_is_not_counted(
    policy: str,
) -> None:
    """The worker's next collective fails as soon as the evicted master stops, which can be before the
    controller sees the eviction and deletes the worker: the failure is the disruption's."""
    cluster = running(pytorchjob("ev", workers=1, restart_policy=policy, run_policy={"backoffLimit": 0}))
    cluster.step(30)
    _disrupt(cluster, "ev-master-0", deleted=True)
    _fail_at(cluster, "ev-worker-0", cluster.now)
    d = cluster.step()
    assert not cond_true(cluster, "Failed") and d.status["restartCount"] == 0
    assert d.status["disruptions"] == 1 and [p["metadata"]["name"] for p in d.delete_pods] == ["ev-worker-0"]
    cluster.step()
    assert cluster.pods["ev-worker-0"]["status"] == {"phase": "Pending"}  # recreated
    del cluster.pods["ev-master-0"]  # its grace period over
    cluster.step()
    assert sorted(cluster.pods) == ["ev-master-0", "ev-worker-0"] and not cond_true(cluster, "Failed")
    assert cluster.job["status"]["restartCount"] == 0


def test_a_peer_that_failed_before_the_disruption_began_is_still_its_own_failure() -> None:
    cluster = running(pytorchjob("ev", workers=1, restart_policy="Never", run_policy={"backoffLimit": 0}))
    cluster.step(30)
    _fail_at(cluster, "ev-worker-0", cluster.now - dt.timedelta(seconds=5))
    _disrupt(cluster, "ev-master-0", deleted=True)
    cluster.step()
    assert cond_true(cluster, "Failed")


def _fail_at(cluster: Cluster, pod: str, moment: dt.datetime) -> None:
    cluster.set(pod, "Failed", code=1)
    state = cluster.pods[pod]["status"]["containerStatuses"][0]["state"]
    state["terminated"]["finishedAt"] = v1.rfc3339(moment)


def cond_true(cluster: Cluster, ctype: str) -> bool:
    return any(
        c["type"] == ctype and c["status"] == "True" for c in cluster.job["status"].get("conditions", [])
    )


# -- stalls -------------------------------------------------------------------------------------------
def _running_since(cluster: Cluster, seconds_ago: float) -> None:
    started = v1.rfc3339(cluster.now - dt.timedelta(seconds=seconds_ago))
    for pod in cluster.pods.values():
        pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": started}}


def _reported(cluster: Cluster, seconds_ago: float, step: int) -> None:
    report = {
        "progressPercentage": 10,
        "metrics": [{"name": "currentStep", "value": str(step)}],
        "lastUpdatedTime": v1.rfc3339(cluster.now - dt.timedelta(seconds=seconds_ago)),
    }
    cluster.job["metadata"].setdefault("annotations", {})["kubetrain.dev/trainer-status"] = json.dumps(report)


def test_a_job_that_stops_reporting_progress_is_restarted_then_failed_as_stalled() -> None:
    manifest = pytorchjob("hung", workers=1, annotations={"kubetrain.dev/stall-timeout-seconds": "60",
                                                        "kubetrain.dev/max-stalls": "1"})  # fmt: skip
    cluster = running(manifest)
    _running_since(cluster, 30)
    _reported(cluster, 20, step=40)
    quiet = cluster.step()
    assert quiet.delete_pods == [] and quiet.requeue_after == pytest.approx(39)  # 60 s after the report
    d = cluster.step(45)  # 66 s since the last report
    assert sorted(p["metadata"]["name"] for p in d.delete_pods) == ["hung-master-0", "hung-worker-0"]
    assert [e.reason for e in d.events if e.type == "Warning"] == ["Stalled"]
    assert "reported no progress for 66s" in d.events[-1].message and "last step 40" in d.events[-1].message
    status = cluster.job["status"]
    assert (status["stalls"], status["restartCount"]) == (1, 1) and d.finish is None
    cluster.step()  # new pods
    for name in cluster.pods:
        cluster.set(name, "Running")
    _running_since(cluster, 0)
    assert cluster.step(30).delete_pods == []  # the clock starts again with the new pods
    final = cluster.step(40)
    assert final.finish is not None and final.finish.reason == "Stalled"
    assert "it stalled 2 times, kubetrain.dev/max-stalls is 1" in cluster.condition("Failed")["message"]


def test_a_stall_restart_whose_delete_failed_finishes_on_the_next_pass_counted_once() -> None:
    cluster = running(
        pytorchjob("hung", workers=1, annotations={"kubetrain.dev/stall-timeout-seconds": "60"})
    )
    for pod in cluster.pods.values():
        pod["metadata"]["creationTimestamp"] = v1.rfc3339(cluster.now - dt.timedelta(seconds=100))
    _running_since(cluster, 90)
    _reported(cluster, 80, step=40)
    old_worker = cluster.pods["hung-worker-0"]["metadata"]["uid"]
    cluster.step(failing=frozenset({"hung-worker-0"}))
    assert list(cluster.pods) == ["hung-worker-0"] and cluster.job["status"]["stalls"] == 1
    again = cluster.step()
    assert [p["metadata"]["name"] for p in again.delete_pods] == ["hung-worker-0"]
    assert "Stalled" not in events(again)
    assert (cluster.job["status"]["stalls"], cluster.job["status"]["restartCount"]) == (1, 1)
    cluster.step()
    assert sorted(cluster.pods) == ["hung-master-0", "hung-worker-0"]
    assert cluster.pods["hung-worker-0"]["metadata"]["uid"] != old_worker
    assert cluster.step().delete_pods == [], "the new pods are left alone"


def test_no_stall_is_found_without_a_timeout_or_while_a_pod_is_not_running() -> None:
    cluster = running(pytorchjob("plain", workers=1))
    _running_since(cluster, 3600)
    assert cluster.step().delete_pods == []
    starting = running(
        pytorchjob("slow", workers=1, annotations={"kubetrain.dev/stall-timeout-seconds": "5"})
    )
    _running_since(starting, 3600)
    starting.pods["slow-worker-0"]["status"]["containerStatuses"][0]["state"] = {"waiting": {}}
    assert starting.step().delete_pods == [] and "stalls" not in starting.job["status"]


# -- TFJob: replica keys in any case, dynamic workers ------------------------------------------------------
TF = v1.Setup(frameworks.by_name("TFJob"))


def tfjob(name: str, specs: dict[str, int], **spec: Any) -> Obj:
    def replica(count: int) -> Obj:
        container = {"name": "tensorflow", "image": "example.com/tf:1"}
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {k: replica(n) for k, n in specs.items()}, **spec},
    }


def test_lower_case_tfjob_replica_keys_run_as_the_canonical_types() -> None:
    cluster = Cluster(tfjob("dist", {"ps": 1, "worker": 2}), TF)
    d = cluster.step()
    assert sorted(cluster.pods) == ["dist-ps-0", "dist-worker-0", "dist-worker-1"]
    assert sorted(d.status["replicaStatuses"]) == ["PS", "Worker"], "upstream's defaulting renames the keys"
    env = {e["name"]: e["value"] for e in cluster.pods["dist-worker-1"]["spec"]["containers"][0]["env"]}
    assert '"task":{"type":"worker","index":1}' in env["TF_CONFIG"]


def test_a_failed_dynamic_worker_leaves_the_tfjob_running_as_upstream_does() -> None:
    dynamic = running(tfjob("dyn", {"Chief": 1, "Worker": 2}, enableDynamicWorker=True), TF)
    dynamic.set("dyn-worker-1", "Failed", code=1)
    d = dynamic.step()
    assert d.finish is None and dynamic.conditions()[-1] == ("Running", "True", "TFJobRunning")
    assert "dyn-worker-1" not in [p["metadata"]["name"] for p in d.create_pods], "Never: not recreated"
    fixed = running(tfjob("fixed", {"Chief": 1, "Worker": 2}), TF)
    fixed.set("fixed-worker-1", "Failed", code=1)
    fixed.step()
    assert fixed.conditions()[-1][0] == "Failed", "without enableDynamicWorker a failed Worker fails the job"
    chief = running(tfjob("chief", {"Chief": 1, "Worker": 2}, enableDynamicWorker=True), TF)
    chief.set("chief-chief-0", "Failed", code=1)
    chief.step()
    assert chief.conditions()[-1][0] == "Failed", "only Workers are dynamic"


# -- suspend and resume ------------------------------------------------------------------------------
def test_a_job_created_suspended_gets_no_pods_and_no_start_time() -> None:
    cluster = Cluster(pytorchjob("test-job", run_policy={"suspend": True}))
    d = cluster.step()
    assert d.phase is v1.Phase.SUSPENDED and d.create_pods == [] and d.create_services == []
    assert cluster.conditions() == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Suspended", "True", "PyTorchJobSuspended"),
    ]
    assert "startTime" not in cluster.job["status"]


def test_suspending_deletes_everything_and_resuming_restarts_the_clock() -> None:
    cluster = running(pytorchjob("test-job", workers=1))
    started = cluster.job["status"]["startTime"]
    cluster.job["spec"]["runPolicy"] = {"suspend": True}
    d = cluster.step()
    assert sorted(p["metadata"]["name"] for p in d.cleanup_pods) == ["test-job-master-0", "test-job-worker-0"]
    assert len(d.cleanup_services) == 2 and cluster.pods == {}
    assert "PyTorchJobSuspended" in events(d)
    status = cluster.job["status"]
    assert status["startTime"] == started
    assert ("Running", "False", "PyTorchJobSuspended") in cluster.conditions()
    assert cluster.conditions()[-1] == ("Suspended", "True", "PyTorchJobSuspended")
    assert all("active" not in r for r in status["replicaStatuses"].values())

    cluster.job["spec"]["runPolicy"] = {"suspend": False}
    resumed = cluster.step()
    assert "PyTorchJobResumed" in events(resumed) and len(resumed.create_pods) == 2
    assert ("Suspended", "False", "PyTorchJobResumed") in cluster.conditions()
    assert cluster.job["status"]["startTime"] == "2026-01-01T12:00:04Z" != started
    for name in cluster.pods:
        cluster.set(name, "Running")
    cluster.step()
    assert cluster.conditions()[-1] == ("Running", "True", "PyTorchJobRunning")


# -- deadlines, TTLs, cleanup ------------------------------------------------------------------------
def test_a_deadline_is_looked_at_on_time_and_fails_the_job_from_its_start_time() -> None:
    cluster = running(pytorchjob("slow", workers=1, run_policy={"activeDeadlineSeconds": 4}))
    assert cluster.last is not None and cluster.last.requeue_after == 3.0
    d = cluster.step(3)
    failed = cluster.condition("Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert "active longer than the specified deadline of 4s" in failed["message"]
    assert len(d.cleanup_pods) == 2


def test_a_new_controller_learns_the_deadline_from_the_jobs_start_time() -> None:
    cluster = running(pytorchjob("restarted", workers=1, run_policy={"activeDeadlineSeconds": 6}))
    fresh = v1.decide(
        cluster.job, v1.Observed(list(cluster.pods.values())), cluster.now + dt.timedelta(seconds=2), SETUP
    )
    assert fresh.requeue_after == 3.0, "no memory of the old controller is needed"


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_the_ttl_deletes_a_finished_job_on_time(outcome: str) -> None:
    cluster = running(
        pytorchjob(
            "short",
            master=False,
            workers=1,
            restart_policy="Never",
            run_policy={"ttlSecondsAfterFinished": 3},
        )
    )
    cluster.set("short-worker-0", outcome, code=0 if outcome == "Succeeded" else 1)
    finishing = cluster.step()
    assert finishing.requeue_after == 3.0 and not finishing.delete_job
    assert cluster.step(2).requeue_after == 1.0
    expired = cluster.step(1)
    assert expired.phase is v1.Phase.FINISHED and expired.delete_job and expired.requeue_after is None


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("None", []),
        ("Running", ["clean-worker-0", "clean-worker-1"]),
        ("All", ["clean-master-0", "clean-worker-0", "clean-worker-1"]),
    ],
)
def test_clean_pod_policy_decides_what_a_finished_job_leaves(policy: str, deleted: list[str]) -> None:
    cluster = running(pytorchjob("clean", workers=2, run_policy={"cleanPodPolicy": policy}))
    cluster.set("clean-master-0", "Succeeded", code=0)
    d = cluster.step()
    assert sorted(p["metadata"]["name"] for p in d.cleanup_pods) == deleted
    services = sorted(s["metadata"]["name"] for s in d.cleanup_services)
    assert services == (deleted if policy != "None" else [])


def test_a_job_failed_by_its_deadline_keeps_no_running_pod_even_under_clean_pod_policy_none() -> None:
    # Upstream keeps the pods training under cleanPodPolicy None; a retry would then train beside them
    # on the same checkpoint dir. Finished pods stay, for their logs.
    cluster = running(
        pytorchjob("keep", workers=1, run_policy={"activeDeadlineSeconds": 4, "cleanPodPolicy": "None"})
    )
    cluster.set("keep-worker-0", "Succeeded", code=0)
    d = cluster.step(4)
    assert cluster.condition("Failed")["reason"] == "DeadlineExceeded"
    assert [p["metadata"]["name"] for p in d.cleanup_pods] == ["keep-master-0"]


# -- refusals and who manages a job ------------------------------------------------------------------
def test_a_refused_child_either_fails_the_job_or_says_why_while_retrying() -> None:
    cluster = running(pytorchjob("refused", workers=1))
    last = cluster.last
    assert last is not None
    waiting = v1.on_rejection(
        last, last.status, "FailedCreate", "exceeded quota", fails_job=False, setup=SETUP
    )
    assert waiting.phase is v1.Phase.RUNNING
    assert ("ReplicaFailure", "True", "FailedCreate") in [
        (c["type"], c["status"], c["reason"]) for c in waiting.status["conditions"]
    ]
    assert waiting.after_creates()["conditions"] == last.status["conditions"]
    failed = v1.on_rejection(last, last.status, "NameConflict", "taken", fails_job=True, setup=SETUP)
    assert failed.phase is v1.Phase.FINISHING and failed.finish is not None
    assert failed.finish.message == "PyTorchJob refused has failed: taken"
    assert len(failed.cleanup_pods) == 2


def test_which_jobs_each_managed_by_mode_takes() -> None:
    compatible, kubetrain_only = (
        Options().settings().managed_by,
        Options(managed_by="kubetrain").settings().managed_by,
    )
    for value, compatible_takes, kubetrain_takes in [
        (None, True, False),
        ("kubeflow.org/training-operator", True, False),
        ("kubetrain.dev/controller", True, True),
        ("kueue.x-k8s.io/multikueue", False, False),
    ]:
        assert (value in compatible, value in kubetrain_only) == (compatible_takes, kubetrain_takes), value


def test_a_starting_jobs_writes_wait_for_one_window_that_began_with_the_first_held_change() -> None:
    """Created, its pods pending, then running, and pods finishing one by one: progress, written once a
    window after the first change was held (the status on record stays what it was meanwhile)."""
    cluster = Cluster(pytorchjob("starting", workers=2))
    on_record: Obj = {}
    created = cluster.step().status
    assert v1.status_hold(on_record, created, None, 100.0, 1.0) == 1.0, "the first write is held a window"
    for name in cluster.pods:
        cluster.set(name, "Running")
    running_ = cluster.step().status
    assert [c["type"] for c in running_["conditions"]] == ["Created", "Running"]
    assert v1.status_hold(on_record, running_, 100.0, 100.4, 1.0) == pytest.approx(0.6), "joins it"
    assert v1.status_hold(on_record, running_, 100.0, 101.0, 1.0) is None, "one write carries them all"
    on_record = running_
    cluster.set("starting-worker-0", "Succeeded", code=0)
    counts = cluster.step().status
    assert v1.status_hold(on_record, counts, None, 200.0, 1.0) == 1.0, "counts alone are progress"
    assert v1.status_hold(on_record, on_record, 200.0, 200.1, 1.0) is None, "no change: nothing to hold"


class _StatusWrites:
    """What ``write_status`` needs of the client and the job cache: the status PATCHes, recorded."""

    def __init__(self) -> None:
        self.patches: list[Obj] = []

    async def patch(self, resource: Any, name: str, body: Obj, *, namespace: str, **_: Any) -> Obj:
        self.patches.append(body)
        metadata = {"name": name, "namespace": namespace, "resourceVersion": "2"}
        return {"metadata": metadata, "status": body["status"]}

    def observe_write(self, updated: Obj) -> None:
        pass


def _reconciler(writes: _StatusWrites) -> V1JobReconciler:
    return V1JobReconciler(
        framework=SETUP.framework,
        kube=writes,  # type: ignore[typeddict-item]
        jobs=writes,  # type: ignore[typeddict-item]
        pods=None,  # type: ignore[typeddict-item]
        services=None,  # type: ignore[typeddict-item]
        expectations=Expectations(),
        recorder=None,  # type: ignore[typeddict-item]
        settings=Options().settings(),
    )


def test_the_next_pass_starts_from_a_held_status_until_another_status_is_on_record() -> None:
    """The reconciler's bookkeeping of a hold (no I/O): a pass decides from the status a held write
    would write, so ``Created`` is decided once; a status on record other than the one the hold began
    from (another writer's) wins, and the hold is dropped."""
    reconciler = _reconciler(_StatusWrites())
    cluster = Cluster(pytorchjob("held", workers=1))
    cached = cluster.job
    created = cluster.step().status
    assert reconciler._coalesce(Pass(cached, created, {}, T0)) == 1.0
    resumed = reconciler._with_held("ns/held", cached)
    assert resumed["status"] == created and resumed["spec"] is cached["spec"]
    assert "PyTorchJobCreated" not in events(v1.decide(resumed, v1.Observed([], []), T0, SETUP))
    written_by_another = {**cached, "status": {"conditions": []}}
    assert reconciler._with_held("ns/held", written_by_another) is written_by_another
    assert reconciler._with_held("ns/held", cached) is cached, "the hold is dropped"


async def test_a_held_status_is_written_when_its_second_is_up_though_no_pass_can_run() -> None:
    """Passes wait for the events of their creates; a job whose pods take long to create still gets
    the status its first pass held back, once the hold is over."""
    writes = _StatusWrites()
    reconciler = _reconciler(writes)
    cluster = Cluster(pytorchjob("slow", workers=1))
    cached = {**cluster.job, "metadata": {**cluster.job["metadata"], "resourceVersion": "1"}}
    created = cluster.step().status
    reconciler._coalesce(Pass(cached, created, {}, T0))
    left = await reconciler.write_held("ns/slow", cached)
    assert left is not None and 0 < left <= 1.0 and writes.patches == [], "not before its second is up"
    reconciler._held["ns/slow"] = replace(reconciler._held["ns/slow"], since=time.monotonic() - 1.0)
    assert await reconciler.write_held("ns/slow", cached) is None
    assert writes.patches == [{"metadata": {"resourceVersion": "1"}, "status": created}]
    assert cached["metadata"]["resourceVersion"] == "1", "the cached job is left as it is"
    assert await reconciler.write_held("ns/slow", cached) is None and len(writes.patches) == 1


def _succeed(cluster: Cluster) -> None:
    cluster.set("news-master-0", "Succeeded", code=0)


def _fail_a_worker(cluster: Cluster) -> None:
    cluster.set("news-worker-0", "Failed", code=137)


def _restart_in_place(cluster: Cluster) -> None:
    cluster.set("news-worker-0", "Running", restarts=1)


def _suspend(cluster: Cluster) -> None:
    cluster.job["spec"]["runPolicy"] = {"suspend": True}


@pytest.mark.parametrize("change", [_succeed, _fail_a_worker, _restart_in_place, _suspend])
def test_news_is_written_at_once_and_carries_what_was_held(change: Any) -> None:
    """An ending, a restart (counted in place or not), a suspension: never held, whatever is pending."""
    cluster = running(pytorchjob("news", workers=1))
    on_record = cluster.job["status"]
    change(cluster)
    assert v1.status_hold(on_record, cluster.step().status, None, 100.0, 1.0) is None
    assert v1.status_hold(on_record, cluster.job["status"], 99.9, 100.0, 1.0) is None


def test_only_a_first_write_sets_its_initial_values_as_progress() -> None:
    cluster = running(pytorchjob("later", workers=1))
    on_record = cluster.job["status"]
    assert not v1.progress_only(on_record, {**on_record, "startTime": "2030-01-01T00:00:00Z"})
    assert not v1.progress_only(on_record, {**on_record, "restartCount": 1})
    assert v1.progress_only({}, on_record), "all of it is what a first write sets"
