"""The lifecycle of a TrainJob, pass by pass, on the pure ``decide`` (docs/trainjob.md).

Each test plays the cluster's part as ``test_v1_decisions`` does: it holds the TrainJob and its pods,
lets ``decide`` look, applies the decision (the status written, the pods created or deleted) and
moves the pods on by hand. The wiring of those writes to a real API server is tested in
``tests/integration/controller/test_trainjob.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from typing import Any

import pytest

from kubetrain.controller.core.skeleton import rfc3339
from kubetrain.controller.trainjob import decisions as tj
from kubetrain.trainjob.build import build
from tests.support import claims_runtime, training_runtime

Obj = dict[str, Any]
T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
SETUP = tj.Setup()
TTL = "kubetrain.dev/ttl-seconds-after-finished"
_uids = itertools.count()


class Cluster:
    """One TrainJob and its pods, as the caches would hold them after each pass's writes."""

    def __init__(
        self,
        runtime: Obj | None = None,
        *,
        nodes: int = 2,
        annotations: dict[str, str] | None = None,
        **spec: Any,
    ) -> None:
        self.runtime = runtime or training_runtime("torch", backoff_limit=0)
        self.job: Obj = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "mnist",
                "namespace": "team",
                "uid": "tj-uid",
                "creationTimestamp": rfc3339(T0),
                "annotations": dict(annotations or {}),
            },
            "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": nodes}, **spec},
        }
        self.pods: dict[str, Obj] = {}
        self.now = T0

    def step(self, seconds: float = 1.0, **observed: Any) -> tj.Decision:
        """One pass, ``seconds`` after the last, with its writes applied (new pods start Pending).
        ``observed`` overrides what the pass found (``unbuilt``, ``runtime_found``, ``departed``)."""
        self.now += dt.timedelta(seconds=seconds)
        info = None if "unbuilt" in observed else build(self.job, self.runtime)
        seen = tj.Observed(list(self.pods.values()), info=info, **observed)
        d = tj.decide(self.job, seen, self.now, SETUP)
        self.apply(d)
        return d

    def apply(self, d: tj.Decision) -> None:
        self.job = {**self.job, "status": d.status}
        for pod in [*d.delete_pods, *d.cleanup_pods, *(d.expiry.pods if d.expiry else [])]:
            self.pods.pop(pod["metadata"]["name"], None)
        for pod in d.create_pods:
            pod["metadata"]["uid"] = f"pod-{next(_uids)}"
            pod["metadata"]["creationTimestamp"] = rfc3339(self.now)
            pod["status"] = {"phase": "Pending"}
            self.pods[pod["metadata"]["name"]] = pod

    def pod(self, index: int, job: str = "node") -> str:
        """The name of the newest pod of ``job`` with completion index ``index``."""
        return [
            n
            for n, p in self.pods.items()
            if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == job
            and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == str(index)
        ][-1]

    def set(
        self, index: int, phase: str, *, code: int | None = None, job: str = "node", **extra: Any
    ) -> None:
        """What the kubelet reports for a pod: its phase, its container's exit code and state."""
        name = self.pod(index, job)
        state: Obj = {"running": {"startedAt": rfc3339(self.now)}} if code is None else {}
        if code is not None:
            state = {"terminated": {"exitCode": code, **extra}}
        container = "node" if job == "node" else job
        self.pods[name]["status"] = {
            "phase": phase,
            "startTime": rfc3339(self.now),
            "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}],
            "containerStatuses": [{"name": container, "restartCount": 0, "state": state}],
        }

    def run_all(self) -> tj.Decision:
        for index in range(len(self.pods)):
            self.set(index, "Running")
        return self.step()

    def conditions(self) -> list[tuple[str, str, str]]:
        return [(c["type"], c["status"], c["reason"]) for c in self.job["status"].get("conditions") or []]

    def condition(self, ctype: str) -> Obj:
        return next(c for c in self.job["status"]["conditions"] if c["type"] == ctype)


def running(cluster: Cluster | None = None) -> Cluster:
    """A TrainJob whose pods were created and all run."""
    cluster = cluster or Cluster()
    cluster.step()
    cluster.run_all()
    return cluster


def events(d: tj.Decision) -> list[str]:
    return [e.reason for e in d.events]


# -- created, running ------------------------------------------------------------------------------
def test_a_missing_runtime_is_waited_for_then_the_pods_are_created_once_it_is_found() -> None:
    cluster = Cluster()
    missing = tj.Unbuilt(tj.RUNTIME_NOT_FOUND, "TrainingRuntime 'torch' not found in namespace team")
    d = cluster.step(unbuilt=missing)
    assert d.phase is tj.Phase.UNRESOLVED and d.requeue_after == tj.RUNTIME_MISSING_RETRY
    assert cluster.conditions() == [("Created", "False", "TrainingRuntimeNotFound")]
    assert events(d) == ["TrainJobResourcesCreationFailed"] and not d.create_pods
    d = cluster.step(runtime_found=True)
    assert cluster.conditions() == [], "a TrainJob has Created only while its runtime is missing"
    assert d.phase is tj.Phase.RUNNING
    assert sorted(
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in d.create_pods
    ) == [
        "0",
        "1",
    ]
    assert d.status["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    ]


def test_running_pods_are_counted_ready_and_nothing_more_is_created() -> None:
    cluster = Cluster()
    cluster.step()
    d = cluster.run_all()
    assert d.phase is tj.Phase.RUNNING and not d.create_pods and not d.delete_pods
    assert d.status["jobsStatus"][0] | {"ready": 1, "active": 1} == d.status["jobsStatus"][0]
    assert d.requeue_after is None, "no deadline, no stall timeout: nothing to look at"
    assert d.copies_report


def test_an_unsupported_runtime_fails_the_trainjob_without_cleaning_anything_up() -> None:
    cluster = Cluster(annotations={TTL: "30"})
    d = cluster.step(unbuilt=tj.Unbuilt(tj.RUNTIME_NOT_SUPPORTED, "unsupported runtime: Foo.example.com"))
    assert d.phase is tj.Phase.UNRESOLVED and d.finish is None
    assert cluster.conditions() == [("Failed", "True", "TrainingRuntimeNotSupported")]
    assert events(d) == ["TrainingRuntimeNotSupported"]
    assert d.requeue_after == 30, "its TTL counts from its failure"


def test_a_trainjob_that_cannot_be_built_fails_with_the_builds_message() -> None:
    cluster = Cluster()
    d = cluster.step(unbuilt=tj.Unbuilt(tj.BUILD_ERROR, "spec.trainer.numNodes must be positive"))
    assert d.phase is tj.Phase.FINISHING and d.finish is not None and not d.finish.succeeded
    assert events(d) == ["TrainJobResourcesCreationFailed"]
    assert cluster.condition("Failed")["message"] == (
        "TrainJob team/mnist cannot be built: spec.trainer.numNodes must be positive"
    )
    assert d.framework == "trainjob", "no runtime was built: the default label"


# -- restarts and failures -------------------------------------------------------------------------
def test_a_failed_pod_is_replaced_within_its_jobs_backoff_limit_then_the_trainjob_fails() -> None:
    cluster = running(Cluster(training_runtime("torch", backoff_limit=1)))
    first = cluster.pod(1)
    cluster.set(1, "Failed", code=3)
    d = cluster.step()
    assert d.phase is tj.Phase.RUNNING and "Failed" not in [c[0] for c in cluster.conditions()]
    assert [p["metadata"]["name"] for p in d.create_pods] != [first] and len(d.create_pods) == 1
    assert d.status["jobFailures"] == {"node-0": 1}
    assert first in cluster.pods, "a failed pod stays, as the Job controller leaves it"
    cluster.pods.pop(first)  # garbage-collected: its failure stays counted
    cluster.set(1, "Failed", code=3)
    still_running = cluster.pod(0)
    d = cluster.step()
    assert d.phase is tj.Phase.FINISHING and cluster.condition("Failed")["reason"] == "FailedJobs"
    assert [p["metadata"]["name"] for p in d.cleanup_pods] == [still_running], "the running pod is stopped"
    assert d.status["firstFailure"]["pod"] == cluster.pod(1)


def test_a_failure_policy_restarts_every_pod_under_a_new_attempt_until_max_restarts() -> None:
    runtime = training_runtime("torch", backoff_limit=0, failurePolicy={"maxRestarts": 1})
    cluster = running(Cluster(runtime))
    cluster.set(0, "Failed", code=1)
    d = cluster.step()
    assert d.phase is tj.Phase.REPLACING and d.restart is not None and d.restart.attempt == 1
    assert events(d) == ["Restarting"] and ("restarted", 1) in d.counters
    assert len(d.delete_pods) == 2 and not cluster.pods, "every pod of the attempt goes"
    assert (d.status["restarts"], d.status["restartsCountTowardsMax"]) == (1, 1)
    d = cluster.step()
    assert len(d.create_pods) == 2
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in d.create_pods} == {"1"}
    cluster.run_all()
    cluster.set(0, "Failed", code=1)
    d = cluster.step()
    assert d.phase is tj.Phase.FINISHING and cluster.condition("Failed")["reason"] == "ReachedMaxRestarts"


def test_pods_of_an_earlier_attempt_go_before_the_new_attempts_are_created() -> None:
    cluster = running(Cluster(training_runtime("torch", backoff_limit=0, failurePolicy={"maxRestarts": 1})))
    cluster.set(0, "Failed", code=1)
    d = cluster.step()
    kept = d.delete_pods[1]
    cluster.pods[kept["metadata"]["name"]] = kept  # its delete failed: it is still there
    d = cluster.step()
    assert d.phase is tj.Phase.REPLACING and d.restart is None
    assert d.delete_pods == [kept] and not d.create_pods, "it holds a hostname the new attempt needs"
    assert len(cluster.step().create_pods) == 2


def test_a_disruption_restarts_the_attempt_without_counting_it() -> None:
    runtime = training_runtime("torch", backoff_limit=0, failurePolicy={"maxRestarts": 0})
    cluster = running(Cluster(runtime))
    evicted = cluster.pods[cluster.pod(0)]
    evicted["metadata"]["deletionTimestamp"] = rfc3339(cluster.now)
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    evicted["status"]["conditions"] = [{**condition, "lastTransitionTime": rfc3339(cluster.now)}]
    peer = cluster.pod(1)
    d = cluster.step()
    assert d.phase is tj.Phase.REPLACING and d.restart is not None and d.restart.attempt == 1
    assert events(d) == ["Disrupted"] and d.counters == [("disrupted", 1)]
    assert d.status["disruptions"] == 1 and "restartsCountTowardsMax" not in d.status
    assert [p["metadata"]["name"] for p in d.delete_pods] == [peer], "the evicted pod is going already"
    assert "Failed" not in [c[0] for c in cluster.conditions()], "maxRestarts 0 is not spent"


def test_a_pod_fenced_off_its_checkpoint_fails_the_trainjob() -> None:
    cluster = running()
    cluster.set(1, "Failed", code=86)
    still_running = cluster.pod(0)
    d = cluster.step()
    assert d.phase is tj.Phase.FINISHING and cluster.condition("Failed")["reason"] == "Fenced"
    assert (
        "a newer attempt of the job owns its checkpoint directory" in cluster.condition("Failed")["message"]
    )
    assert [p["metadata"]["name"] for p in d.cleanup_pods] == [still_running]


# -- stalls ----------------------------------------------------------------------------------------
def test_a_trainjob_that_stops_reporting_progress_is_restarted_then_failed_as_stalled() -> None:
    stall = {"kubetrain.dev/stall-timeout-seconds": "60", "kubetrain.dev/max-stalls": "1"}
    cluster = running(Cluster(annotations=stall))
    assert cluster.step().requeue_after == 58, "looked at again when it could have stalled"
    d = cluster.step(58)
    assert d.phase is tj.Phase.REPLACING and events(d) == ["Stalled"] and ("restarted", 1) in d.counters
    assert (d.status["stalls"], d.status["restarts"], d.status["restartsCountTowardsMax"]) == (1, 1, 1)
    cluster.step()
    cluster.run_all()
    d = cluster.step(60)
    assert d.phase is tj.Phase.FINISHING and cluster.condition("Failed")["reason"] == "Stalled"
    assert "it stalled 2 times" in cluster.condition("Failed")["message"]


def test_no_stall_is_found_while_a_pod_is_not_running() -> None:
    cluster = running(Cluster(annotations={"kubetrain.dev/stall-timeout-seconds": "60"}))
    cluster.set(1, "Pending")
    cluster.pods[cluster.pod(1)]["status"]["containerStatuses"] = []
    d = cluster.step(600)
    assert d.phase is tj.Phase.RUNNING and d.requeue_after is None


# -- deadline, suspend, resume ---------------------------------------------------------------------
def test_the_active_deadline_is_looked_at_on_time_and_fails_the_trainjob() -> None:
    cluster = running(Cluster(activeDeadlineSeconds=60))
    assert cluster.step().requeue_after == 57
    d = cluster.step(57)
    assert d.phase is tj.Phase.FINISHING and cluster.condition("Failed")["reason"] == "DeadlineExceeded"
    assert cluster.condition("Failed")["message"].startswith("TrainJob exceeded its active deadline of 60s")
    assert len(d.cleanup_pods) == 2 and not d.copies_report
    assert d.status["jobsStatus"][0]["failed"] == 1 and d.status["jobsStatus"][0]["active"] == 0


def test_suspending_deletes_the_pods_and_resuming_restarts_the_deadline_clock() -> None:
    cluster = running(Cluster(activeDeadlineSeconds=60))
    cluster.job["spec"] = {**cluster.job["spec"], "suspend": True}
    d = cluster.step(30)
    assert d.phase is tj.Phase.SUSPENDED and len(d.delete_pods) == 2 and not cluster.pods
    assert cluster.conditions() == [("Suspended", "True", "Suspended")] and events(d) == ["Suspended"]
    assert d.status["jobsStatus"][0] | {"suspended": 1, "active": 0} == d.status["jobsStatus"][0]
    assert events(cluster.step(100)) == [], "suspended once"
    cluster.job["spec"] = {**cluster.job["spec"], "suspend": False}
    d = cluster.step()
    assert cluster.conditions() == [("Suspended", "False", "Resumed")] and events(d) == ["Resumed"]
    assert len(d.create_pods) == 2
    assert d.requeue_after == 60, "the deadline counts from the resumption, not the creation"


# -- finishing -------------------------------------------------------------------------------------
def test_every_job_succeeding_completes_the_trainjob_and_its_ttl_deletes_it_on_time() -> None:
    cluster = running(Cluster(annotations={TTL: "30"}))
    cluster.set(0, "Succeeded", code=0)
    assert cluster.step().phase is tj.Phase.RUNNING
    cluster.set(1, "Succeeded", code=0)
    d = cluster.step()
    assert d.phase is tj.Phase.FINISHING and d.finish is not None and d.finish.succeeded
    assert cluster.conditions() == [("Complete", "True", "AllJobsCompleted")]
    assert d.cleanup_pods == [], "finished pods stay, for their logs"
    assert d.requeue_after == 30
    d = cluster.step(10)
    assert d.phase is tj.Phase.FINISHED and not d.delete_job and d.requeue_after == 20
    assert cluster.step(20).delete_job


def test_a_finished_trainjob_is_left_finished_and_its_stale_counts_are_settled() -> None:
    cluster = running()
    cluster.set(1, "Failed", code=3)
    cluster.step()
    cluster.job["status"]["jobsStatus"][0].update(active=1, ready=1)  # as an earlier version left it
    d = cluster.step()
    assert d.phase is tj.Phase.FINISHED and d.finish is None and not d.create_pods
    assert d.status["jobsStatus"][0]["active"] == 0
    assert d.requeue_after is None, "no TTL"


def completed_on_claims(jobset_ttl: int, annotations: dict[str, str] | None = None) -> Cluster:
    """A TrainJob that completed on a runtime whose claims it owns: a ``scratch`` one, and an ``output``
    one mounted at /workspace/output; the runtime's TTL is ``jobset_ttl``."""
    runtime = claims_runtime("claims", output_retained=False)
    runtime["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = jobset_ttl
    cluster = Cluster(runtime, nodes=1, annotations=annotations)
    cluster.step()
    cluster.set(0, "Succeeded", code=0, job="dataset-initializer")
    cluster.step()
    cluster.set(0, "Succeeded", code=0)
    assert cluster.step().phase is tj.Phase.FINISHING
    return cluster


def test_the_runtimes_ttl_deletes_what_jobset_would_and_keeps_the_trainjob() -> None:
    cluster = completed_on_claims(5)
    d = cluster.step(2)
    assert d.phase is tj.Phase.FINISHED and d.expiry is None and d.requeue_after == 3
    d = cluster.step(3)
    assert d.expiry is not None and len(d.expiry.pods) == 2
    assert (d.expiry.service, d.expiry.claims) == ("mnist", ["scratch-mnist", "output-mnist"])
    assert not d.delete_job


def test_no_ttl_deletes_the_claim_that_holds_the_trainjobs_output() -> None:
    cluster = completed_on_claims(1, {TTL: "1", "kubetrain.dev/checkpoint-dir": "/workspace/output"})
    d = cluster.step(5)
    assert d.expiry is not None and d.expiry.claims == ["scratch-mnist"], "the output's claim stays"
    assert not d.delete_job and d.deletion_held is not None
    assert "would delete the claim output-mnist, which holds /workspace/output" in d.deletion_held
    assert cluster.conditions()[-1] == ("Complete", "True", "AllJobsCompleted"), "it still reads as Complete"
    assert ("DeletionHeld", "True", "OutputOnOwnedClaim") in cluster.conditions()
    d = cluster.step(5)
    assert events(d) == [] and d.deletion_held is None, "held once"
    assert d.requeue_after is None


# -- rank 0's report, refusals ---------------------------------------------------------------------
def test_rank_0s_report_is_copied_also_from_a_pod_deleted_since_the_last_pass() -> None:
    cluster = running()
    report = {"step": 100, "loss": 0.5}
    cluster.set(0, "Failed", code=3, message=json.dumps(report))
    d = cluster.step()
    assert d.report == report and d.phase is tj.Phase.FINISHING
    departed = cluster.pods.pop(cluster.pod(0))
    d = cluster.step(departed=[departed])
    assert d.phase is tj.Phase.FINISHED and d.report == report and d.copies_report


@pytest.mark.parametrize("fails", [True, False])
def test_a_refused_child_either_fails_the_trainjob_or_says_why_while_retrying(fails: bool) -> None:
    cluster = Cluster()
    d = cluster.step()
    after = tj.on_rejection(d, d.status, "FailedCreate", "pods is forbidden: quota", fails_job=fails)
    if fails:
        assert after.phase is tj.Phase.FINISHING and after.finish is not None
        assert after.finish.message.startswith("TrainJob team/mnist has failed: pods is forbidden: quota")
        assert [c["type"] for c in after.status["conditions"]] == ["Failed"]
    else:
        assert after.phase is tj.Phase.RUNNING and after.finish is None
        assert [(c["type"], c["reason"]) for c in after.status["conditions"]] == [
            ("ReplicaFailure", "FailedCreate")
        ]
        assert after.after_creates().get("conditions") == [], "pods created again end it"


def test_a_runtime_snapshot_whose_name_is_taken_fails_the_trainjob() -> None:
    cluster = Cluster()
    taken = tj.Unbuilt("NameConflict", "ConfigMap mnist-runtime-snapshot already exists")
    d = cluster.step(unbuilt=taken, runtime_found=True)
    assert d.phase is tj.Phase.FINISHING and cluster.condition("Failed")["reason"] == "NameConflict"
    assert cluster.condition("Failed")["message"].startswith("TrainJob team/mnist has failed: ConfigMap")
