"""Elastic PyTorchJobs: rendezvous env, the HPA, success when any worker finishes (reference §2.6, §7.1 13-16)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from tests.support import HANG, Jobs, eventually, pytorchjob, runs_for

ELASTIC = {
    "rdzvBackend": "c10d",
    "minReplicas": 1,
    "maxReplicas": 3,
    "maxRestarts": 3,
    "metrics": [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
        }
    ],
}


async def test_an_elastic_job_gets_rendezvous_env_and_an_hpa(
    controller: Any, jobs: Jobs, api_client: client.ApiClient, namespace: str
) -> None:
    await jobs.create(
        pytorchjob("elastic", master=False, workers=1, worker_annotations=HANG, elasticPolicy=ELASTIC)
    )
    (pod,) = await jobs.wait_pods("elastic", 1)
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_NNODES"] == "1:3"
    assert env["PET_RDZV_ENDPOINT"] == "elastic-worker-0:8080"
    assert env["PET_MAX_RESTARTS"] == "3"
    autoscaling = client.AutoscalingV2Api(api_client)
    hpa = await eventually(lambda: _hpa(autoscaling, namespace, "elastic"), what="the HPA")
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 3)
    assert hpa.spec.scale_target_ref.kind == "PyTorchJob" and hpa.spec.scale_target_ref.name == "elastic"

    await jobs.patch("elastic", {"spec": {"runPolicy": {"suspend": True}}})
    await eventually(
        lambda: _no_hpa(autoscaling, namespace, "elastic"), what="the HPA to be deleted on suspend"
    )


async def _hpa(api: client.AutoscalingV2Api, namespace: str, name: str) -> Any:
    try:
        return await api.read_namespaced_horizontal_pod_autoscaler(name, namespace)
    except client.ApiException:
        return None


async def _no_hpa(api: client.AutoscalingV2Api, namespace: str, name: str) -> bool:
    return await _hpa(api, namespace, name) is None


async def test_an_elastic_job_succeeds_when_a_worker_succeeds(controller: Any, jobs: Jobs) -> None:
    policy = {k: v for k, v in ELASTIC.items() if k != "metrics"}
    job = pytorchjob("elastic-done", master=False, workers=2, worker_annotations=HANG, elasticPolicy=policy)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] = runs_for("2s")
    await jobs.create(job)
    done = await jobs.wait_condition("elastic-done", "Succeeded")
    assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] >= 1


async def test_scaling_workers_up_and_down_follows_the_spec(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("scaled", master=False, workers=2, worker_annotations=HANG))
    await jobs.wait_pods("scaled", 2)
    await jobs.patch("scaled", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})
    pods = await jobs.wait_pods("scaled", 3)
    assert sorted(p.metadata.name for p in pods) == ["scaled-worker-0", "scaled-worker-1", "scaled-worker-2"]
    await jobs.patch("scaled", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}})
    pods = await jobs.wait_pods("scaled", 1)
    assert [p.metadata.name for p in pods] == ["scaled-worker-0"]
    services = await eventually(lambda: _services_named(jobs, "scaled", ["scaled-worker-0"]), what="services")
    assert services


async def _services_named(jobs: Jobs, name: str, wanted: list[str]) -> bool:
    live = sorted(s.metadata.name for s in await jobs.services(name) if not s.metadata.deletion_timestamp)
    return live == wanted


async def test_an_hpa_of_that_name_held_by_someone_else_fails_the_job_and_is_left_alone(
    controller: Any, jobs: Jobs, api_client: client.ApiClient, namespace: str
) -> None:
    autoscaling = client.AutoscalingV2Api(api_client)
    theirs = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "taken-hpa"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 9,
            "metrics": ELASTIC["metrics"],
        },
    }
    await autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, theirs)
    await jobs.create(
        pytorchjob("taken-hpa", master=False, workers=1, worker_annotations=HANG, elasticPolicy=ELASTIC)
    )
    job = await jobs.wait_condition("taken-hpa", "Failed", timeout=30)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "NameConflict"
    assert "HorizontalPodAutoscaler taken-hpa already exists" in failed["message"]
    hpa = await autoscaling.read_namespaced_horizontal_pod_autoscaler("taken-hpa", namespace)
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (2, 9), "somebody else's HPA is not changed"
    assert hpa.spec.scale_target_ref.name == "web" and not hpa.metadata.deletion_timestamp
