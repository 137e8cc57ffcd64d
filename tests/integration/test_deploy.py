"""The deploy/ manifests are valid for the API server, and their RBAC is enough to run the controller."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from kubetrain.controller.main import Options, run
from tests.conftest import REPO, Kubectl
from tests.support import Jobs, eventually, pytorchjob, runs_for


@pytest.fixture(scope="module")
def controller_namespace(kubectl: Kubectl) -> str:
    kubectl("apply", "-f", str(REPO / "deploy" / "base" / "namespace.yaml"))
    return "kubetrain-system"


@pytest.mark.parametrize("target", ["deploy/base", "deploy/overlays/standalone"])
def test_every_manifest_is_accepted_by_the_api_server(
    kubectl: Kubectl, controller_namespace: str, target: str
) -> None:
    out = kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-k", str(REPO / target)
    ).stdout
    assert "deployment.apps/kubetrain-controller serverside-applied (server dry run)" in out


def test_the_runtimes_and_extras_are_accepted_by_the_api_server(kubectl: Kubectl, crds: None) -> None:
    out = kubectl(
        "apply", "--server-side", "--dry-run=server", "-k", str(REPO / "deploy" / "runtimes")
    ).stdout
    assert out.count("clustertrainingruntime.trainer.kubeflow.org/") == 8, out
    out = kubectl(
        "apply", "--server-side", "--dry-run=server", "-k", str(REPO / "deploy" / "extras" / "mpi-ssh-keys")
    ).stdout
    assert "clusterrole.rbac.authorization.k8s.io/kubetrain-controller-mpi-ssh-keys" in out


def test_the_deployment_is_locked_down() -> None:
    documents = list(yaml.safe_load_all((REPO / "deploy" / "base" / "deployment.yaml").read_text()))
    pod = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["limits"] and container["resources"]["requests"]


def test_the_cluster_role_grants_no_secrets() -> None:
    documents = yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text())
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    assert not any("secrets" in rule["resources"] or "*" in rule["resources"] for rule in role["rules"])
    assert not any("*" in rule["verbs"] for rule in role["rules"])


@pytest.mark.usefixtures("crds")
async def test_the_controller_runs_with_only_its_own_rbac(
    kubectl: Kubectl,
    controller_namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    jobs: Jobs,
    custom: client.CustomObjectsApi,
) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "base" / "rbac.yaml"))
    token = kubectl("create", "token", "kubetrain-controller", "-n", controller_namespace).stdout.strip()
    admin = yaml.safe_load(kubeconfig.read_text())
    admin["users"] = [{"name": "controller", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "controller"
    restricted = tmp_path / "controller.kubeconfig"
    restricted.write_text(yaml.safe_dump(admin))

    options = Options(
        kubeconfig=str(restricted),
        namespace=jobs.namespace,
        leader_elect=True,
        leader_election_namespace=controller_namespace,
        leader_election_id=f"test-{jobs.namespace}",
        metrics_bind_address="0",
        health_probe_bind_address="0",
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run(options, stop=stop))
    try:
        await jobs.create(
            pytorchjob(
                "rbac",
                workers=1,
                master_annotations=runs_for("2s"),
                worker_annotations=runs_for("2s"),
                run_policy={"ttlSecondsAfterFinished": 1},
            )
        )
        await jobs.wait_condition("rbac", "Succeeded", timeout=60)
        await eventually(lambda: _deleted(jobs), timeout=30, what="the TTL deletion (needs delete on jobs)")
        coordination = client.CoordinationV1Api(jobs.custom.api_client)
        lease = await coordination.read_namespaced_lease(f"test-{jobs.namespace}", controller_namespace)
        assert lease.spec.holder_identity
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert not task.exception()


async def _deleted(jobs: Jobs) -> bool:
    return await jobs.get("rbac") is None
