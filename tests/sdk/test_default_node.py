"""``kubetrain dev up --process-node-default``: a pod that names no node runs for real on the process
node; a pod that tolerates the simulated taint is still simulated."""

from __future__ import annotations

from kubernetes_asyncio import client

from kubetrain.devcluster.cluster import PROCESS_NODE
from tests.e2e.test_process_node import wait_phase


def _pod(name: str, **spec: object) -> dict[str, object]:
    main = {"name": "main", "image": "python:3.12", "command": ["python", "-c", "print('ran'); exit(3)"]}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [main], **spec}}


async def test_the_nodes_are_tainted_the_other_way_round(core: client.CoreV1Api) -> None:
    listed = {node.metadata.name: node for node in (await core.list_node()).items}
    assert not listed.pop(PROCESS_NODE).spec.taints
    assert listed, "no simulated nodes"
    for node in listed.values():
        assert node.metadata.labels["kubetrain.dev/simulated"] == "true"
        assert ("kubetrain.dev/simulated", "NoSchedule") in [(t.key, t.effect) for t in node.spec.taints]


async def test_a_pod_that_names_no_node_runs_on_the_process_node(
    core: client.CoreV1Api, namespace: str
) -> None:
    await core.create_namespaced_pod(namespace, _pod("bare"))
    done = await wait_phase(core, namespace, "bare", "Succeeded", "Failed")
    assert done.spec.node_name == PROCESS_NODE
    assert done.status.phase == "Failed" and done.status.container_statuses[0].state.terminated.exit_code == 3
    assert await core.read_namespaced_pod_log("bare", namespace) == "ran\n"


async def test_a_pod_that_asks_to_be_simulated_is_simulated(core: client.CoreV1Api, namespace: str) -> None:
    # As docs/dev-cluster.md shows: the simulated nodes' label and a toleration of their taint.
    toleration = {"key": "kubetrain.dev/simulated", "operator": "Exists", "effect": "NoSchedule"}
    await core.create_namespaced_pod(
        namespace, _pod("sim", nodeSelector={"kubetrain.dev/simulated": "true"}, tolerations=[toleration])
    )
    done = await wait_phase(core, namespace, "sim", "Succeeded", "Failed")
    # kwok ends it as its annotations say (succeed, by default): the command that exits 3 never ran.
    assert done.spec.node_name.startswith("kwok-") and done.status.phase == "Succeeded"
