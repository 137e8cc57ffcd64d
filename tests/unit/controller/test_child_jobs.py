"""A TrainJob's child Jobs decide as the Kubernetes Job controller and JobSet would: podFailurePolicy,
backoffLimitPerIndex, activeDeadlineSeconds, failurePolicy rules on Job failure reasons, and the labels
of coordinator, groupName and startupPolicy."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.controller.trainjob import jobset
from kubetrain.controller.trainjob.indexedjob import ChildJob
from kubetrain.trainjob.build import build
from kubetrain.trainjob.state import BuildError, TrainJobInfo

RUNTIMES = Path(__file__).resolve().parents[3] / "deploy" / "runtimes"
NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def info_with(job_spec: dict[str, Any] | None = None, nodes: int = 2, **jobset_spec: Any) -> TrainJobInfo:
    """torch-distributed whose node Job template carries ``job_spec`` (restartPolicy Never)."""
    runtime: dict[str, Any] = yaml.safe_load((RUNTIMES / "torch-distributed.yaml").read_text())
    node_job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    node_job.update(copy.deepcopy(job_spec or {}))
    node_job["template"]["spec"]["restartPolicy"] = "Never"
    runtime["spec"]["template"]["spec"].update(jobset_spec)
    job = {
        **trainjob("mnist"),
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": nodes}},
    }
    return build(job, runtime)


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team", "uid": "uid-1"},
    }


class Pods:
    """Pods of the node Job as the controller creates them, then as the kubelet leaves them."""

    def __init__(self, info: TrainJobInfo) -> None:
        self.info = info
        self.pods: list[dict[str, Any]] = []

    def create(self, index: int, *, child: ChildJob | None = None, age: float = 10) -> dict[str, Any]:
        pod = jobset.build_pod(
            self.info, child or ChildJob(self.info.pod_sets[0], 0), index, attempt=0, plugins=[]
        )
        assert all(p["metadata"]["name"] != pod["metadata"]["name"] for p in self.pods), "a name taken twice"
        pod["metadata"]["uid"] = pod["metadata"]["name"]
        pod["metadata"]["creationTimestamp"] = stamp(age)
        pod["status"] = {
            "phase": "Running",
            "containerStatuses": [{"name": "node", "restartCount": 0, "state": {}}],
        }
        self.pods.append(pod)
        return pod

    @staticmethod
    def fail(pod: dict[str, Any], code: int = 1, conditions: list[dict[str, str]] | None = None) -> None:
        pod["status"] = {
            "phase": "Failed",
            "conditions": conditions or [],
            "containerStatuses": [
                {"name": "node", "restartCount": 0, "state": {"terminated": {"exitCode": code}}}
            ],
        }

    @staticmethod
    def succeed(pod: dict[str, Any]) -> None:
        pod["status"] = {"phase": "Succeeded", "containerStatuses": []}

    def observe(self, **bookkeeping: Any) -> jobset.Observation:
        return jobset.observe(self.info, self.pods, 0, now=NOW, **bookkeeping)


def only(obs: jobset.Observation) -> ChildJob:
    [child] = obs.jobs
    return child


FAIL_ON_42 = {
    "rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "In", "values": [42]}}
    ]
}


def test_a_fail_job_rule_fails_the_child_job_at_its_first_matching_failure() -> None:
    info = info_with({"backoffLimit": 5, "podFailurePolicy": FAIL_ON_42})
    pods = Pods(info)
    first = pods.create(0)
    pods.create(1)
    pods.fail(first, 42)
    child = only(pods.observe())
    assert child.failure is not None and child.failure.reason == "PodFailurePolicy"
    assert child.failure.message == (
        f"Container node for pod team/{first['metadata']['name']} failed with exit code 42 matching FailJob rule at index 0"
    )
    decision = jobset.on_job_failure(info, [child], 0)
    assert (decision.restart, decision.reason) == (False, "FailedJobs")
    assert "(PodFailurePolicy: Container node for pod" in decision.message


def test_a_failure_no_rule_matches_counts_against_the_backoff_limit() -> None:
    info = info_with({"backoffLimit": 1, "podFailurePolicy": FAIL_ON_42})
    pods = Pods(info)
    pods.fail(pods.create(0), 1)
    child = only(pods.observe())
    assert child.failures == 1 and not child.failed and child.missing() == [0, 1]
    pods.fail(pods.create(0, child=child), 1)
    assert only(pods.observe()).failure.reason == "BackoffLimitExceeded"  # type: ignore[union-attr]


def test_an_ignored_failure_is_not_counted_and_its_replacement_gets_a_new_name() -> None:
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    info = info_with({"backoffLimit": 0, "podFailurePolicy": policy}, nodes=1)
    pods = Pods(info)
    preempted = [{"type": "DisruptionTarget", "status": "True"}]
    for _ in range(3):  # preempted three times: never counted, each replacement named anew
        child = only(pods.observe())
        assert child.missing() == [0]
        pods.fail(pods.create(0, child=child), 137, preempted)
    child = only(pods.observe())
    assert not child.failed and child.failures == 0 and child.retry(0) == (0, 3)
    replacement = pods.create(0, child=child)
    annotations = replacement["metadata"]["annotations"]
    assert annotations["batch.kubernetes.io/job-index-ignored-failure-count"] == "3"


@pytest.mark.parametrize("deleted", [False, True])
def test_a_disrupted_pod_restarts_the_attempt_uncounted_unless_a_rule_names_disruptions(
    deleted: bool,
) -> None:
    info = info_with({"backoffLimit": 0}, nodes=2)
    pods = Pods(info)
    evicted, peer = pods.create(0), pods.create(1)
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    if deleted:
        evicted["metadata"]["deletionTimestamp"] = stamp(0)
        evicted["status"]["conditions"] = [condition]
    else:
        pods.fail(evicted, 143, [condition])
    obs = pods.observe()
    assert obs.disrupted == [evicted]
    assert not only(obs).failed and only(obs).failures == 0
    assert peer in only(obs).live.values()


def test_a_disruption_records_the_gpu_seconds_of_every_run_of_the_attempt_it_cut_short() -> None:
    info = info_with({"backoffLimit": 0}, nodes=3)
    pods = Pods(info)
    evicted, peer, unstarted = pods.create(0), pods.create(1), pods.create(2)
    for pod in (evicted, peer, unstarted):
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    pods.fail(evicted, 143, [{**condition, "lastTransitionTime": stamp(10)}])
    evicted["status"]["startTime"], peer["status"]["startTime"] = stamp(100), stamp(40)
    # Until the disruption 10 s ago: the evicted pod ran 90 s, its peer 30 s; the third never started.
    assert jobset.disrupted_gpu_seconds(pods.pods, pods.observe(), NOW) == 8 * 90 + 8 * 30


def test_backoff_limit_per_index_fails_an_index_and_the_job_once_every_index_finished() -> None:
    info = info_with({"backoffLimitPerIndex": 1})
    pods = Pods(info)
    pods.fail(pods.create(0))
    running = pods.create(1)
    child = only(pods.observe())
    assert child.retry(0) == (1, 0) and not child.failed
    second = pods.create(0, child=child)
    assert second["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] == "1"
    pods.fail(second)
    child = only(pods.observe())
    assert child.failed_indexes == {0} and child.missing() == [], "a failed index gets no new pod"
    assert not child.failed, "the other indexes run on"
    assert child.limits.backoff_limit is None, "with backoffLimitPerIndex alone, no Job-wide limit"
    pods.succeed(running)
    child = only(pods.observe())
    assert child.failure is not None and child.failure.reason == "FailedIndexes"
    assert "indexes 0 failed, backoffLimitPerIndex 1" in child.failure.summary


def test_a_replacement_carries_its_index_count_so_a_collected_pod_takes_nothing_back() -> None:
    info = info_with({"backoffLimitPerIndex": 1})
    pods = Pods(info)
    first = pods.create(0)
    pods.create(1)
    pods.fail(first)
    second = pods.create(0, child=only(pods.observe()))
    pods.pods.remove(first)  # the pod garbage collector removes the first failure
    pods.fail(second)
    child = only(pods.observe())
    assert child.retry(0) == (2, 0) and child.failed_indexes == {0}


def test_max_failed_indexes_ends_the_job_as_soon_as_too_many_indexes_failed() -> None:
    info = info_with({"backoffLimitPerIndex": 0, "maxFailedIndexes": 0})
    pods = Pods(info)
    pods.fail(pods.create(0))
    pods.create(1)
    child = only(pods.observe())
    assert child.failure is not None and child.failure.reason == "MaxFailedIndexesExceeded"


def test_a_fail_index_rule_fails_the_index_at_once() -> None:
    policy = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [7]}}]}
    info = info_with({"backoffLimitPerIndex": 5, "podFailurePolicy": policy})
    pods = Pods(info)
    pods.fail(pods.create(0), 7)
    pods.create(1)
    child = only(pods.observe())
    assert child.failed_indexes == {0} and not child.failed


def test_failed_indexes_kept_in_the_status_survive_their_pods() -> None:
    info = info_with({"backoffLimitPerIndex": 0})
    pods = Pods(info)
    pods.create(1)
    child = only(pods.observe(failed_indexes={"node-0": [0]}))
    assert child.failed_indexes == {0} and child.missing() == []


def test_the_job_deadline_counts_from_its_first_pod() -> None:
    info = info_with({"activeDeadlineSeconds": 60})
    pods = Pods(info)
    pods.create(0, age=30)
    pods.create(1, age=30)
    obs = pods.observe()
    assert not only(obs).failed and obs.next_deadline(NOW) == 30
    assert obs.start_times == {"node-0": stamp(30)}
    late = pods.observe(started={"node-0": stamp(90)})  # the status remembers an earlier start
    child = only(late)
    assert child.failure is not None and child.failure.reason == "DeadlineExceeded"
    assert child.failure.message == "Job was active longer than specified deadline"


def test_a_failure_policy_rule_matches_the_job_failure_reason_and_message() -> None:
    info = info_with({"backoffLimit": 5, "podFailurePolicy": FAIL_ON_42})
    pods = Pods(info)
    pods.fail(pods.create(0), 42)
    pods.create(1)
    child = only(pods.observe())
    rules = [
        {"name": "deadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
        {"name": "other-code", "action": "FailJobSet", "onJobFailureMessagePatterns": ["exit code 43"]},
        {"name": "code-42", "action": "FailJobSet", "onJobFailureMessagePatterns": [r"exit code 4\d"]},
    ]
    info.jobset["spec"]["failurePolicy"] = {"maxRestarts": 3, "rules": rules}
    decision = jobset.on_job_failure(info, [child], 0)
    assert (decision.restart, decision.reason) == (False, "FailJobSetFailurePolicyAction")
    assert "rule code-42" in decision.message
    rules[2]["onJobFailureReasons"] = ["PodFailurePolicy"]
    rules[2]["action"] = "RestartJobSetAndIgnoreMaxRestarts"
    assert jobset.on_job_failure(info, [child], 3).restart


def test_with_a_failure_policy_but_no_matching_rule_the_job_set_restarts_up_to_max_restarts() -> None:
    info = info_with({"backoffLimit": 0})
    pods = Pods(info)
    pods.fail(pods.create(0))
    child = only(pods.observe())
    info.jobset["spec"]["failurePolicy"] = {"rules": []}
    decision = jobset.on_job_failure(info, [child], 0)
    assert (decision.restart, decision.reason) == (False, "ReachedMaxRestarts"), (
        "JobSet's default, maxRestarts 0"
    )
    del info.jobset["spec"]["failurePolicy"]
    assert jobset.on_job_failure(info, [child], 0).reason == "FailedJobs"


def test_the_coordinator_and_group_name_label_every_pod_as_jobset_does() -> None:
    info = info_with(coordinator={"replicatedJob": "node", "podIndex": 1})
    info.pod_sets[0].group = "workers"
    pod = jobset.build_pod(info, ChildJob(info.pod_sets[0], 0), 0, attempt=0, plugins=[])
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["jobset.sigs.k8s.io/coordinator"] == "mnist-node-0-1.mnist"
    assert annotations["jobset.sigs.k8s.io/coordinator"] == "mnist-node-0-1.mnist"
    assert (labels["jobset.sigs.k8s.io/group-name"], labels["jobset.sigs.k8s.io/group-replicas"]) == (
        "workers",
        "1",
    )
    with pytest.raises(BuildError, match=r"spec.template.spec.coordinator names pod 5 of job 0 of node"):
        info_with(coordinator={"replicatedJob": "node", "podIndex": 5})


def test_group_indexes_count_within_each_group() -> None:
    runtime: dict[str, Any] = yaml.safe_load((RUNTIMES / "deepspeed-distributed.yaml").read_text())
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        rjob["groupName"] = "launch" if rjob["name"] == "launcher" else "workers"
    job = {
        **trainjob("ds"),
        "spec": {"runtimeRef": {"name": "deepspeed-distributed"}, "trainer": {"numNodes": 3}},
    }
    info = build(job, runtime)
    launcher = info.pod_set("launcher")
    assert launcher is not None
    labels = jobset.pod_labels(info, launcher, 0, 0, 0)
    assert (labels["jobset.sigs.k8s.io/group-name"], labels["jobset.sigs.k8s.io/job-group-index"]) == (
        "launch",
        "0",
    )
    assert labels["jobset.sigs.k8s.io/job-global-index"] == str(info.pod_sets.index(launcher))


def test_startup_policy_in_order_starts_each_replicated_job_once_the_one_before_has_started() -> None:
    runtime: dict[str, Any] = yaml.safe_load((RUNTIMES / "torchtune-llama3.2-1b.yaml").read_text())
    runtime["spec"]["template"]["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    job = {**trainjob("tune"), "spec": {"runtimeRef": {"name": "torchtune-llama3.2-1b"}}}
    info = build(job, runtime)
    model = info.pod_set("model-initializer")
    assert model is not None and model.depends_on == [{"name": "dataset-initializer", "status": "Ready"}]
    obs = jobset.observe(info, [], 0)
    assert not jobset.depends_on_met(info, model, obs)


@pytest.mark.parametrize(("complete", "into"), [(False, "failed"), (True, "succeeded")])
def test_a_finished_trainjob_has_no_active_child_job(complete: bool, into: str) -> None:
    status = [{"name": "node", "ready": 1, "succeeded": 0, "failed": 1, "active": 2, "suspended": 0}]
    jobset.settle_jobs_status(status, complete=complete)
    expected = {"name": "node", "ready": 0, "succeeded": 0, "failed": 1, "active": 0, "suspended": 0}
    expected[into] += 2
    assert status == [expected]
    jobset.settle_jobs_status(status, complete=complete)
    assert status == [expected], "settling twice changes nothing"
