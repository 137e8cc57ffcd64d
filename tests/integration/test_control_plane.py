"""The local control plane behaves like a real cluster: scheduling, kwok stages, garbage collection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from kubetrain.devcluster import build
from kubetrain.devcluster.cluster import COMPONENTS, ClusterOptions, DevCluster
from kubetrain.devcluster.nodes import GPU_RESOURCE
from kubetrain.devcluster.podfinalizer import PodFinalizer
from kubetrain.kube.client import KubeClient
from tests.docs_commands import run_documented, shell_env
from tests.support import eventually


def _pod(name: str, *, annotations: dict[str, str] | None = None, gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["true"]}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


async def _wait_phase(
    core: client.CoreV1Api, namespace: str, name: str, phases: set[str], timeout: float = 60
) -> client.V1Pod:
    seen: list[str] = []
    for _ in range(int(timeout * 10)):
        pod = await core.read_namespaced_pod(name, namespace)
        if not seen or seen[-1] != pod.status.phase:
            seen.append(pod.status.phase)
        if pod.status.phase in phases:
            return pod
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {name} never reached {phases}; phases seen: {seen}")


def test_the_dev_cluster_page_commands_work(dev_cluster: DevCluster, tmp_path: Path) -> None:
    env = {
        **shell_env(dev_cluster.kubeconfig, "default", tmp_path),
        "KUBETRAIN_DEV_STATE": str(dev_cluster.state_dir),
    }
    here = {"~/.cache/kubetrain/dev-cluster": str(dev_cluster.state_dir)}
    done = run_documented(
        "docs/dev-cluster.md",
        "export KUBECONFIG=",
        "kubectl get nodes",
        "kubetrain dev status",
        "kubetrain dev logs kube-apiserver",
        env=env,
        replace=here,
    )
    for node in ("kwok-gpu-0", "kwok-cpu-0", "kubetrain-process-node"):
        assert node in done.stdout
    assert "kube-apiserver" in done.stdout and "│ no" not in done.stdout, done.stdout


def test_every_component_reports_healthy(dev_cluster: DevCluster) -> None:
    statuses = dev_cluster.status()
    assert [s.name for s in statuses] == [c for c in COMPONENTS if c != "kueue"]  # kueue: only with --kueue
    assert all(s.running and s.healthy for s in statuses), statuses


async def test_gpu_nodes_advertise_gpus_and_are_ready(core: client.CoreV1Api) -> None:
    nodes = (await core.list_node(label_selector="nvidia.com/gpu.present=true")).items
    assert len(nodes) >= 1
    for node in nodes:
        assert node.status.allocatable[GPU_RESOURCE] == "8"
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        assert any(t.key == GPU_RESOURCE and t.effect == "NoSchedule" for t in node.spec.taints)


async def test_gpu_pod_is_scheduled_on_a_gpu_node_and_runs_to_success(
    core: client.CoreV1Api, namespace: str
) -> None:
    await core.create_namespaced_pod(
        namespace, _pod("gpu", gpus=1, annotations={"sim.kubetrain.dev/run-duration": "2s"})
    )
    running = await _wait_phase(core, namespace, "gpu", {"Running", "Succeeded"})
    assert running.status.phase == "Running", "the pod skipped Running"
    node = await core.read_node(running.spec.node_name)
    assert node.metadata.labels.get("nvidia.com/gpu.present") == "true"
    done = await _wait_phase(core, namespace, "gpu", {"Succeeded", "Failed"})
    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].state.terminated.exit_code == 0


async def test_pod_without_gpus_never_lands_on_a_tainted_gpu_node(
    core: client.CoreV1Api, namespace: str
) -> None:
    await core.create_namespaced_pod(namespace, _pod("cpu"))
    pod = await _wait_phase(core, namespace, "cpu", {"Running", "Succeeded"})
    node = await core.read_node(pod.spec.node_name)
    assert "nvidia.com/gpu.present" not in (node.metadata.labels or {})


async def test_pod_annotated_to_fail_ends_failed_with_its_exit_code(
    core: client.CoreV1Api, namespace: str
) -> None:
    await core.create_namespaced_pod(
        namespace,
        _pod(
            "fails",
            annotations={
                "sim.kubetrain.dev/outcome": "fail",
                "sim.kubetrain.dev/exit-code": "137",
                "sim.kubetrain.dev/reason": "OOMKilled",
            },
        ),
    )
    pod = await _wait_phase(core, namespace, "fails", {"Failed", "Succeeded"})
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


async def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(
    core: client.CoreV1Api, namespace: str
) -> None:
    await core.create_namespaced_pod(namespace, _pod("greedy", gpus=9))
    for _ in range(100):
        pod = await core.read_namespaced_pod("greedy", namespace)
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        if scheduled is not None:
            break
        await asyncio.sleep(0.1)
    assert pod.status.phase == "Pending"
    assert scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable"
    assert "nvidia.com/gpu" in scheduled.message


async def test_deleting_a_namespace_garbage_collects_its_pods(core: client.CoreV1Api) -> None:
    name = "t-gc-" + str(id(core))[-6:]
    await core.create_namespace({"metadata": {"name": name}})
    for _ in range(100):
        if any(
            sa.metadata.name == "default" for sa in (await core.list_namespaced_service_account(name)).items
        ):
            break
        await asyncio.sleep(0.1)
    owner = await core.create_namespaced_config_map(name, {"metadata": {"name": "owner"}})
    child = _pod("child", annotations={"sim.kubetrain.dev/outcome": "hang"})
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    await core.create_namespaced_pod(name, child)
    await core.create_namespaced_pod(name, _pod("plain", annotations={"sim.kubetrain.dev/outcome": "hang"}))
    await core.delete_namespace(name)
    for _ in range(600):
        namespaces = {ns.metadata.name for ns in (await core.list_namespace()).items}
        if name not in namespaces:
            break
        await asyncio.sleep(0.1)
    assert name not in namespaces, "the namespace was never finalized"
    assert (await core.list_namespaced_pod(name)).items == []


async def test_owner_deletion_garbage_collects_dependents(core: client.CoreV1Api, namespace: str) -> None:
    owner = await core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    child = _pod("owned", annotations={"sim.kubetrain.dev/outcome": "hang"})
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    await core.create_namespaced_pod(namespace, child)
    await core.delete_namespaced_config_map("owner", namespace)
    for _ in range(300):
        if not (await core.list_namespaced_pod(namespace)).items:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the garbage collector did not delete the owned pod")


def test_claims_bind_on_a_cluster_without_the_process_node(tmp_path: Path) -> None:
    # As the upstream examples that mount a claim need (TFJob mnist, multi-worker): their pods are
    # only scheduled, on a simulated node too, once the claim is bound.
    cluster = DevCluster(tmp_path / "no-process-node")
    cluster.up(ClusterOptions(gpu_nodes=0, cpu_nodes=1, process_node=False))
    try:
        kubectl = [str(build.binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}"]
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        pod = {"apiVersion": "v1", "kind": "Pod", **_pod("reader")}
        pod["metadata"]["namespace"] = "default"
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        for body in (claim, pod):
            subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(body), text=True, check=True)
        for what, condition in (
            ("pvc/data", "jsonpath={.status.phase}=Bound"),
            ("pod/reader", "condition=PodScheduled"),
        ):
            subprocess.run(
                [*kubectl, "wait", what, f"--for={condition}", "--timeout=60s"],
                check=True,
                capture_output=True,
            )
    finally:
        cluster.down()


async def test_a_simulated_node_removes_a_deleted_pod_and_a_late_removal_spares_its_replacement(
    core: client.CoreV1Api, namespace: str, kubeconfig: Path
) -> None:
    """The final delete of a terminating pod names its uid, as a kubelet's does: a controller recreates
    a failed replica under the same name, and a late delete by name would remove the replacement."""
    hang = {"sim.kubetrain.dev/outcome": "hang"}
    await core.create_namespaced_pod(namespace, _pod("slot", annotations=hang))
    first = await _wait_phase(core, namespace, "slot", {"Running"})
    await core.delete_namespaced_pod("slot", namespace)  # graceful: the node must finish it
    for _ in range(100):
        if not (await core.list_namespaced_pod(namespace)).items:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the simulated node never removed the terminating pod")
    await core.create_namespaced_pod(namespace, _pod("slot", annotations=hang))
    second = await _wait_phase(core, namespace, "slot", {"Running"})
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        await PodFinalizer(kube).remove(namespace, "slot", first.metadata.uid)  # the late delete
    finally:
        await kube.close()
    still = await core.read_namespaced_pod("slot", namespace)
    assert (still.metadata.uid, still.metadata.deletion_timestamp) == (second.metadata.uid, None)


async def _read_pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return await core.read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def test_an_unscheduled_pod_left_terminating_by_a_cut_off_delete_is_removed(
    core: client.CoreV1Api, namespace: str
) -> None:
    """The API server deletes an unscheduled pod in two steps: it marks the pod deleting (grace 0), then
    removes it. A client killed between the two (the crash storm does this) leaves a pod no kubelet
    will ever remove; a real cluster's pod garbage collector deletes it. Here a policy that refuses the
    second step stands in for the cut."""
    custom = client.CustomObjectsApi(core.api_client)
    group, version = "admissionregistration.k8s.io", "v1"
    name = f"hold-deletes-in-{namespace}"
    policy = {
        "apiVersion": f"{group}/{version}",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["DELETE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [{"expression": "!has(oldObject.metadata.deletionTimestamp)", "message": "held"}],
        },
    }
    binding = {
        "apiVersion": f"{group}/{version}",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    unschedulable = {"nodeSelector": {"kubetrain.dev/nowhere": "true"}}
    await custom.create_cluster_custom_object(group, version, "validatingadmissionpolicies", policy)
    try:
        await custom.create_cluster_custom_object(
            group, version, "validatingadmissionpolicybindings", binding
        )
        stuck: client.V1Pod | None = None
        for attempt in range(60):  # until the API server has loaded the policy
            pod = _pod(f"cut-{attempt}")
            pod["spec"].update(unschedulable)
            await core.create_namespaced_pod(namespace, pod)
            with contextlib.suppress(client.ApiException):
                await core.delete_namespaced_pod(f"cut-{attempt}", namespace)
            stuck = await _read_pod(core, namespace, f"cut-{attempt}")
            if stuck is not None:
                break
            await asyncio.sleep(0.5)
        assert stuck is not None, "the policy never held a delete"
        assert stuck.metadata.deletion_timestamp is not None and not stuck.spec.node_name
        assert stuck.metadata.deletion_grace_period_seconds == 0
    finally:
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(client.ApiException):
                await custom.delete_cluster_custom_object(group, version, plural, name)

    async def gone() -> bool:
        return await _read_pod(core, namespace, stuck.metadata.name) is None

    # the pod garbage collector looks every 20 s
    await eventually(gone, timeout=60, what=f"pod {stuck.metadata.name}, left terminating, to be removed")
