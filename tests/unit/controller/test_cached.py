"""What the controller's caches keep: what the reconcilers read, without managedFields or child specs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.controller import cached
from kubetrain.controller.core import observe
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import PODS

MANAGED = [{"manager": "kwok", "operation": "Update", "fieldsV1": {"f:status": {"f:phase": {}}}}]


def a_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-master-0",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"training.kubeflow.org/replica-type": "master"},
            "ownerReferences": [{"uid": "job-uid", "controller": True, "kind": "PyTorchJob", "name": "job"}],
            "managedFields": MANAGED,
        },
        "spec": {"containers": [{"name": "pytorch", "env": [{"name": "RANK", "value": "0"}]}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "pytorch", "restartCount": 2, "state": {"terminated": {"exitCode": 137}}}
            ],
        },
    }


def test_a_cached_pod_keeps_metadata_status_and_node_but_not_the_rest_of_its_spec_or_managed_fields() -> None:
    pod = a_pod()
    kept = cached.pod(pod)
    assert "spec" not in kept and "managedFields" not in kept["metadata"]
    pod["spec"]["nodeName"] = "gpu-1"
    assert cached.pod(pod)["spec"] == {"nodeName": "gpu-1"}  # where the replica that failed first ran
    assert kept["status"] == pod["status"]
    assert kept["metadata"] == {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    assert observe.exit_code(kept, "pytorch") == observe.exit_code(pod, "pytorch") == 137
    assert pod["metadata"]["managedFields"] == MANAGED, "the object the API server sent is not changed"


def test_a_cached_pod_status_drops_the_addresses_qos_class_and_images_no_decision_reads() -> None:
    pod = a_pod()
    running = {"running": {"startedAt": "2026-01-01T00:00:01Z"}}
    pod["status"] |= {
        "startTime": "2026-01-01T00:00:00Z",
        "podIP": "10.0.0.7",
        "podIPs": [{"ip": "10.0.0.7"}],
        "hostIP": "10.1.0.1",
        "hostIPs": [{"ip": "10.1.0.1"}],
        "qosClass": "BestEffort",
        "initContainerStatuses": [
            {"name": "init", "image": "busybox", "imageID": "sha256:1", "restartCount": 1}
        ],
    }
    pod["status"]["containerStatuses"][0] |= {
        "image": "trainer:1",
        "imageID": "sha256:2",
        "containerID": "c://1",
    }
    pod["status"]["containerStatuses"].append({"name": "sidecar", "image": "s:1", "state": running})
    kept = cached.pod(pod)["status"]
    assert kept == {
        "phase": "Failed",
        "startTime": "2026-01-01T00:00:00Z",
        "containerStatuses": [
            {"name": "pytorch", "restartCount": 2, "state": {"terminated": {"exitCode": 137}}},
            {"name": "sidecar", "state": running},
        ],
        "initContainerStatuses": [{"name": "init", "restartCount": 1}],
    }
    assert observe.restart_count({"status": kept}) == observe.restart_count(pod) == 3
    assert pod["status"]["podIP"] == "10.0.0.7", "the object the API server sent is not changed"


def test_pods_parsed_apart_share_one_copy_of_their_keys_and_short_values_in_the_cache() -> None:
    first, second = (cached.pod(json.loads(json.dumps(a_pod()))) for _ in range(2))
    assert first == second
    (key,) = (k for k in first["status"] if k == "phase")
    (other,) = (k for k in second["status"] if k == "phase")
    assert key is other and first["status"]["phase"] is second["status"]["phase"]
    assert first["metadata"]["ownerReferences"][0]["name"] is second["metadata"]["ownerReferences"][0]["name"]
    long = "x" * (cached.SHARED_LENGTH + 1)
    messages = [cached.stripped(json.loads(json.dumps({"kind": "Event", "message": long}))) for _ in range(2)]
    assert messages[0]["message"] is not messages[1]["message"], "long strings are kept as they came"


def test_the_table_of_shared_strings_starts_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cached, "SHARED_STRINGS", 8)
    for i in range(100):
        cached.service({"kind": "Service", "metadata": {"name": f"s{i}", "uid": f"u{i}"}})
        assert len(cached._shared) <= 8
    assert cached.service({"kind": "Service", "metadata": {"name": "s99"}})["metadata"]["name"] == "s99"


def test_resource_versions_are_kept_as_they_came_and_never_fill_the_table_of_shared_strings() -> None:
    pod = a_pod()
    pod["metadata"]["resourceVersion"] = "resource-version-of-this-test-only"
    kept = cached.pod(pod)
    assert kept["metadata"]["resourceVersion"] == "resource-version-of-this-test-only"
    assert "resource-version-of-this-test-only" not in cached._shared
    assert "job-uid" in cached._shared, "an owner's uid, shared by all of its children, is"


def test_a_cached_service_is_its_metadata_and_anything_else_loses_only_managed_fields() -> None:
    service = {"kind": "Service", "metadata": {"name": "s", "managedFields": MANAGED}, "spec": {"ports": []}}
    assert cached.service(service) == {"kind": "Service", "metadata": {"name": "s"}}
    job = {"kind": "PyTorchJob", "metadata": {"name": "j", "managedFields": MANAGED}, "spec": {"x": 1}}
    assert cached.stripped(job) == {"kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {"x": 1}}


def test_an_informer_stores_and_hands_its_handlers_the_transformed_object() -> None:
    informer = Informer(None, PODS, transform=cached.pod)  # type: ignore[arg-type]
    seen: list[dict[str, Any] | None] = []
    informer.add_handler(lambda old, new: seen.append(new))
    informer._apply("ADDED", a_pod())
    stored = informer.get("ns/job-master-0")
    assert stored is not None and "spec" not in stored and seen == [stored]


def paged_client(*lists: list[list[dict[str, Any]]]) -> tuple[KubeClient, list[int]]:
    """A client whose LISTs answer ``lists`` in turn, page by page; and the page requests it saw."""
    pages: list[dict[str, Any]] = [
        {"items": items, "metadata": {"continue": "more"} if i < len(pods) - 1 else {"resourceVersion": "9"}}
        for pods in lists
        for i, items in enumerate(pods)
    ]
    asked: list[int] = []
    kube = KubeClient(object())  # type: ignore[arg-type]

    async def request(method: str, path: str, **_: Any) -> dict[str, Any]:
        asked.append(len(asked))
        return pages[len(asked) - 1]

    kube.request = request  # type: ignore[method-assign]
    return kube, asked


def test_a_relist_keeps_each_page_as_cached_as_it_arrives_and_transforms_each_object_once() -> None:
    """At thousands of pods a list is tens of MiB as sent: only the cached copies may pile up."""
    pods = [dict(a_pod(), metadata=dict(a_pod()["metadata"], name=f"p{i}")) for i in range(3)]
    kube, asked = paged_client([pods[:2], pods[2:]], [pods[:1]])
    transformed: list[tuple[int, str]] = []

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        transformed.append((len(asked), obj["metadata"]["name"]))
        return cached.pod(obj)

    informer = Informer(kube, PODS, transform=transform)
    asyncio.run(informer._relist())
    assert transformed == [(1, "p0"), (1, "p1"), (2, "p2")], "page one is cached before page two is asked"
    assert all("spec" not in pod for pod in informer.objects())
    asyncio.run(informer._relist())  # p1 and p2 are gone
    assert [pod["metadata"]["name"] for pod in informer.objects()] == ["p0"]
    assert len(transformed) == 4, "what left the cache is not transformed again"


def _job(version: str, phase: str) -> dict[str, Any]:
    meta = {"namespace": "ns", "name": "j", "uid": "u", "resourceVersion": version}
    return {"kind": "PyTorchJob", "metadata": meta, "status": {"phase": phase}}


def test_a_watch_event_older_than_our_own_write_does_not_step_the_cache_back() -> None:
    """The controller writes a job's terminal status and deletes its pods; the watch, lagging, then
    delivers an event from before that write. Applied, it would show the job running with its pods
    gone, and the next pass would create them again."""
    informer = Informer(None, PYTORCHJOB.resource)  # type: ignore[arg-type]
    seen: list[str] = []
    informer.add_handler(lambda old, new: seen.append(new["metadata"]["resourceVersion"] if new else "-"))
    informer._apply("ADDED", _job("10", "Running"))
    informer.observe_write(_job("12", "Failed"))
    informer._apply("MODIFIED", _job("11", "Running"))  # the watch catching up
    informer._apply("MODIFIED", _job("12", "Failed"))  # our own write, as the watch delivers it
    assert informer.get("ns/j") == _job("12", "Failed")
    informer._apply("MODIFIED", _job("13", "Failed"))
    informer.observe_write(_job("12", "Failed"))  # an answer that arrives after the watch moved on
    assert informer.get("ns/j") == _job("13", "Failed")
    assert seen == ["10", "12", "13"]
