"""The informer handlers: which job a change enqueues, and which changes settle expectations."""

from __future__ import annotations

from typing import Any

from kubetrain.api.kinds import PYTORCHJOB, TRAINJOB
from kubetrain.controller.core import handlers
from kubetrain.controller.core.departed import DepartedPods
from kubetrain.controller.core.skeleton import Settings
from kubetrain.controller.trainjob.reconciler import TrainJobReconciler
from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.reconciler import V1JobReconciler
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.resources import SERVICES


def child(kind: str, owner_kind: str = "TrainJob", api_version: str = "trainer.kubeflow.org/v1alpha1") -> Any:
    owner = {"apiVersion": api_version, "kind": owner_kind, "name": "tj", "uid": "u", "controller": True}
    return {
        "kind": kind,
        "metadata": {"name": "c", "namespace": "ns", "uid": "c-1", "ownerReferences": [owner]},
    }


def test_a_child_enqueues_the_job_of_the_owner_kind_that_controls_it() -> None:
    queued: list[str] = []
    handle = handlers.child_handler(TRAINJOB.resource, queued.append)
    handle(None, child("Service"))
    handle(None, child("Pod", owner_kind="PyTorchJob", api_version="kubeflow.org/v1"))
    handle(None, child("Pod", api_version="example.com/v1"))
    assert queued == ["ns/tj"]
    assert handlers.owner_key(child("Pod", "PyTorchJob", "kubeflow.org/v1"), PYTORCHJOB.resource) == "ns/tj"


def test_a_handler_given_expectations_settles_the_adds_and_deletes_it_sees() -> None:
    expectations = Expectations()
    expectations.expect_creations("ns/tj", 1)
    expectations.expect_deletion("ns/tj", "c-1")
    handle = handlers.child_handler(TRAINJOB.resource, lambda _: None, expectations)
    handle(None, child("Pod"))
    assert not expectations.satisfied("ns/tj")
    handle(child("Pod"), None)
    assert expectations.satisfied("ns/tj")


def test_a_deleted_job_forgets_its_expectations_and_runs_on_delete() -> None:
    expectations = Expectations()
    expectations.expect_creations("ns/tj", 3)
    dropped: list[str] = []
    handle = handlers.job_handler(lambda _: None, expectations, on_delete=dropped.append)
    job = {"metadata": {"name": "tj", "namespace": "ns"}}
    handle(None, job)
    assert dropped == [] and not expectations.satisfied("ns/tj")
    handle(job, None)
    assert dropped == ["ns/tj"] and expectations.satisfied("ns/tj")


def test_a_deleted_pod_with_a_training_report_is_kept_for_the_next_pass() -> None:
    departed = DepartedPods()
    handle = handlers.child_handler(TRAINJOB.resource, lambda _: None, Expectations(), departed)
    silent, reporting = child("Pod"), child("Pod")
    reporting["metadata"]["name"] = "rank0"
    terminated = {"terminated": {"exitCode": 143, "message": '{"last_checkpoint": "/ckpt/step-3"}'}}
    reporting["status"] = {"containerStatuses": [{"name": "node", "state": terminated}]}
    handle(None, reporting)
    handle(silent, None)
    assert departed.take("ns/tj") == []  # neither an update nor a pod without a report is kept
    handle(reporting, None)
    kept = departed.take("ns/tj")
    assert [p["metadata"]["name"] for p in kept] == ["rank0"] and departed.take("ns/tj") == []
    departed.restore("ns/tj", kept)  # a pass that failed to copy it puts it back
    assert departed.take("ns/tj") == kept
    departed.restore("ns/tj", kept)
    departed.forget("ns/tj")  # the job is gone
    assert departed.take("ns/tj") == []


def test_a_v1_job_waits_for_the_services_it_created_as_it_does_for_its_pods() -> None:
    """A pass that ran before the watch showed the services of the pass before would create them
    again (a 409 and a GET each, one job in ten of a burst of 50): a v1 job's services settle its
    expectations as its pods do. A TrainJob tracks no Service create, so its Services settle nothing
    its pods are owed."""
    unused: Any = None
    shared: Any = {"kube": unused, "jobs": unused, "pods": unused, "services": unused, "recorder": unused}
    v1 = V1JobReconciler(
        framework=frameworks.by_name("PyTorchJob"), expectations=Expectations(), settings=Settings(), **shared
    )
    v1.expectations.expect_creations("ns/tj", 1)
    v1.child_handler(lambda _: None, SERVICES)(None, child("Service", "PyTorchJob", "kubeflow.org/v1"))
    assert v1.expectations.satisfied("ns/tj")

    v2 = TrainJobReconciler(
        runtimes=unused,
        cluster_runtimes=unused,
        snapshots=unused,
        expectations=Expectations(),
        settings=Settings(),
        **shared,
    )
    v2.expectations.expect_creations("ns/tj", 1)
    v2.child_handler(lambda _: None, SERVICES)(None, child("Service"))
    assert not v2.expectations.satisfied("ns/tj")
