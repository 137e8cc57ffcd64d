"""A PyTorchJob becomes pods and headless services exactly as upstream builds them (reference §2, §7.1)."""

from __future__ import annotations

from typing import Any

from tests.support import HANG, Jobs, pytorchjob


def _env(pod: Any, container: str = "pytorch") -> dict[str, str]:
    spec = next(c for c in pod.spec.containers if c.name == container)
    return {e.name: e.value for e in spec.env or []}


async def test_master_and_workers_get_a_pod_and_a_service_each(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("test-job", workers=2, master_annotations=HANG, worker_annotations=HANG))
    pods = await jobs.wait_pods("test-job", 3)
    assert sorted(p.metadata.name for p in pods) == [
        "test-job-master-0",
        "test-job-worker-0",
        "test-job-worker-1",
    ]
    services = {s.metadata.name: s for s in await jobs.services("test-job")}
    assert sorted(services) == ["test-job-master-0", "test-job-worker-0", "test-job-worker-1"]
    master_service = services["test-job-master-0"]
    assert master_service.spec.cluster_ip == "None"
    assert [(p.name, p.port) for p in master_service.spec.ports] == [("pytorchjob-port", 8080)]
    assert master_service.spec.selector == {
        "training.kubeflow.org/job-name": "test-job",
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
    }


async def test_pods_carry_upstream_labels_and_the_master_role(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("labels", workers=1, master_annotations=HANG, worker_annotations=HANG))
    pods = {p.metadata.name: p for p in await jobs.wait_pods("labels", 2)}
    master, worker = pods["labels-master-0"], pods["labels-worker-0"]
    assert master.metadata.labels["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in worker.metadata.labels
    assert worker.metadata.labels["training.kubeflow.org/replica-type"] == "worker"
    assert worker.metadata.labels["training.kubeflow.org/replica-index"] == "0"
    assert master.metadata.annotations["sim.kubetrain.dev/outcome"] == "hang", "template annotations are kept"


async def test_children_are_owned_by_the_job(controller: Any, jobs: Jobs) -> None:
    created = await jobs.create(
        pytorchjob("owned", workers=1, master_annotations=HANG, worker_annotations=HANG)
    )
    pods = await jobs.wait_pods("owned", 2)
    for obj in [*pods, *await jobs.services("owned")]:
        (ref,) = obj.metadata.owner_references
        assert (ref.api_version, ref.kind, ref.name, ref.uid) == (
            "kubeflow.org/v1",
            "PyTorchJob",
            "owned",
            created["metadata"]["uid"],
        )
        assert ref.controller and ref.block_owner_deletion


async def test_the_master_keeps_its_port_and_gets_the_torch_env(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("env", workers=2, master_annotations=HANG, worker_annotations=HANG))
    pods = {p.metadata.name: p for p in await jobs.wait_pods("env", 3)}
    master = pods["env-master-0"]
    (port,) = master.spec.containers[0].ports
    assert (port.name, port.container_port, port.protocol) == ("pytorchjob-port", 8080, "TCP")
    env = _env(master)
    assert env["MASTER_ADDR"] == "env-master-0" and env["MASTER_PORT"] == "8080"
    assert env["PET_NPROC_PER_NODE"] == "auto"
    assert (env["WORLD_SIZE"], env["RANK"], env["PET_NNODES"], env["PYTHONUNBUFFERED"]) == (
        "3",
        "0",
        "3",
        "1",
    )
    assert [_env(pods[f"env-worker-{i}"])["RANK"] for i in range(2)] == ["1", "2"]


async def test_a_worker_only_job_elects_worker_zero_as_master_role(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("workers", workers=2, master=False, worker_annotations=HANG))
    pods = {p.metadata.name: p for p in await jobs.wait_pods("workers", 2)}
    assert pods["workers-worker-0"].metadata.labels.get("training.kubeflow.org/job-role") == "master"
    env = _env(pods["workers-worker-1"])
    assert "MASTER_ADDR" not in env and env["PET_NNODES"] == "2"


async def test_replica_restart_policy_replaces_the_template_one(controller: Any, jobs: Jobs) -> None:
    job = pytorchjob(
        "policy", workers=1, restart_policy="ExitCode", master_annotations=HANG, worker_annotations=HANG
    )
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["restartPolicy"] = "Always"
    await jobs.create(job)
    pods = {p.metadata.name: p for p in await jobs.wait_pods("policy", 2)}
    assert pods["policy-worker-0"].spec.restart_policy == "Never", "ExitCode is enforced by the controller"
    await jobs.wait_event("policy", "PodTemplateOverridden")


async def test_gpu_pods_tolerate_the_gpu_taint_and_land_on_gpu_nodes(controller: Any, jobs: Jobs) -> None:
    await jobs.create(pytorchjob("gpus", workers=2, gpus=1, master_annotations=HANG, worker_annotations=HANG))
    pods = await jobs.wait_pods("gpus", 3, phase="Running")
    for pod in pods:
        assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in pod.spec.tolerations or [])
        assert pod.spec.node_name.startswith("kwok-gpu-")


async def test_a_job_with_gpu_workers_and_a_cpu_master_is_warned_about(controller: Any, jobs: Jobs) -> None:
    job = pytorchjob("lopsided", workers=1, master_annotations=HANG, worker_annotations=HANG)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "2"}
    }
    await jobs.create(job)
    created = await jobs.wait_condition("lopsided", "Created")
    message = next(c["message"] for c in created["status"]["conditions"] if c["type"] == "Created")
    assert "Master request no GPUs while Worker request 2 per pod" in message
    event = await jobs.wait_event("lopsided", "LopsidedGPURequests")
    assert event[0] == "Warning"


async def test_checkpoint_annotations_become_env_and_a_volume(controller: Any, jobs: Jobs) -> None:
    annotations = {
        "kubetrain.dev/checkpoint-dir": "/ckpt",
        "kubetrain.dev/checkpoint-volume": "ckpt-pvc",
        "kubetrain.dev/last-checkpoint": "/ckpt/step-00000100",
        "kubetrain.dev/attempt": "2",
    }
    await jobs.create(
        pytorchjob(
            "ckpt", workers=1, annotations=annotations, master_annotations=HANG, worker_annotations=HANG
        )
    )
    for pod in await jobs.wait_pods("ckpt", 2):
        env = _env(pod)
        assert env["KUBETRAIN_CHECKPOINT_DIR"] == "/ckpt"
        assert env["KUBETRAIN_RESUME_FROM"] == "/ckpt/step-00000100"
        assert env["KUBETRAIN_ATTEMPT"] == "2"
        (volume,) = [v for v in pod.spec.volumes if v.name == "kubetrain-checkpoints"]
        assert volume.persistent_volume_claim.claim_name == "ckpt-pvc"
        assert any(m.mount_path == "/ckpt" for m in pod.spec.containers[0].volume_mounts)
