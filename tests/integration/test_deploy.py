"""The deploy/ manifests are valid for the API server, and their RBAC is enough to run the controller."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from kubetrain.controller.main import Options, run
from tests.conftest import REPO, Kubectl
from tests.docs_commands import run_documented
from tests.support import Jobs, eventually, kubeconfig_of, runs_for, training_runtime, trainjob


@pytest.fixture(scope="module")
def controller_namespace(kubectl: Kubectl) -> str:
    kubectl("apply", "-f", str(REPO / "deploy" / "base" / "namespace.yaml"))
    # A server dry run creates no namespace for the namespaced objects of the same apply to land in.
    kubectl(
        "apply",
        "-f",
        "-",
        input=kubectl("create", "namespace", "kubeflow-system", "--dry-run=client", "-o", "yaml").stdout,
    )
    return "kubetrain-system"


@pytest.mark.parametrize("target", ["deploy/base", "deploy/overlays/standalone"])
def test_every_manifest_is_accepted_by_the_api_server(
    kubectl: Kubectl, controller_namespace: str, target: str
) -> None:
    out = kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-k", str(REPO / target)
    ).stdout
    assert "deployment.apps/kubetrain-controller serverside-applied (server dry run)" in out


def test_the_runtimes_and_extras_are_accepted_by_the_api_server(
    shell: dict[str, str], crds: None, namespace: str
) -> None:
    # As the docs say, as a dry run: other tests count the runtimes of the shared cluster.
    dry = {" -k ": " --dry-run=server -k "}
    for done in (
        run_documented(
            "docs/installing.md", "kubectl apply --server-side -k deploy/runtimes", env=shell, replace=dry
        ),
        run_documented(
            "docs/trainjob.md", "kubectl apply --server-side -k deploy/runtimes", env=shell, replace=dry
        ),
    ):
        assert done.stdout.count("clustertrainingruntime.trainer.kubeflow.org/") == 8, done.stdout
    out = run_documented(
        "docs/installing.md", "kubectl apply -k deploy/extras/mpi-ssh-keys", env=shell, replace=dry
    ).stdout
    assert "clusterrole.rbac.authorization.k8s.io/kubetrain-controller-mpi-ssh-keys" in out
    out = run_documented(
        "docs/installing.md",
        "kubectl create rolebinding kubetrain-mpi-ssh-keys",
        env=shell,
        replace={"-n training": f"-n {namespace} --dry-run=server"},
    ).stdout
    assert "rolebinding.rbac.authorization.k8s.io/kubetrain-mpi-ssh-keys created (server dry run)" in out


@pytest.mark.usefixtures("crds")
def test_the_namespaced_install_is_accepted_by_the_api_server(
    shell: dict[str, str], kubectl: Kubectl, controller_namespace: str
) -> None:
    kubectl("create", "namespace", "training")  # as the docs say: the watched namespace exists first
    try:
        out = run_documented(
            "docs/installing.md",
            "kubectl apply --server-side -k deploy/overlays/namespaced",
            env=shell,
            replace={" -k ": " --force-conflicts --dry-run=server -k "},
        ).stdout
    finally:
        kubectl("delete", "namespace", "training", "--wait=false")
    assert (
        "rolebinding.rbac.authorization.k8s.io/kubetrain-controller serverside-applied (server dry run)"
        in out
    )
    assert "clusterrolebinding.rbac.authorization.k8s.io/kubetrain-controller serverside" not in out
    assert "clusterrolebinding.rbac.authorization.k8s.io/kubetrain-controller-cluster serverside" in out


def test_the_crds_install_with_kustomize_too(shell: dict[str, str], crds: None) -> None:
    out = run_documented("docs/crds.md", "kubectl apply --server-side -k deploy/crds/", env=shell).stdout
    assert out.count("customresourcedefinition.apiextensions.k8s.io/") == 8, out


@pytest.mark.usefixtures("crds")
def test_the_install_as_documented_rolls_out(shell: dict[str, str], kubectl: Kubectl) -> None:
    # On the dev cluster the controller's pods land on simulated nodes: this checks the install, not
    # the image (which the CI machine cannot build).
    try:
        run_documented(
            "docs/installing.md",
            "kubectl apply --server-side -k deploy/overlays/standalone",
            "kubectl -n kubetrain-system rollout status",
            env=shell,
        )
        pods = run_documented("docs/installing.md", "kubectl -n kubetrain-system get pods", env=shell).stdout
        assert pods.count("Running") == 2, pods
        # What the Kubeflow Trainer SDK reads on connecting, readable by any authenticated user.
        public = kubectl(
            "get",
            "configmap",
            "kubeflow-trainer-public",
            "-n",
            "kubeflow-system",
            "-o",
            "json",
            "--as=system:serviceaccount:default:default",
        ).stdout
        assert json.loads(public)["data"]["kubeflow_trainer_version"] == "v2.3.0"
        crds = run_documented("docs/installing.md", "kubectl get crd", env=shell).stdout
        assert "pytorchjobs.kubeflow.org" in crds and "trainjobs.trainer.kubeflow.org" in crds
        run_documented("docs/installing.md", "kubetrain list -A", env=shell)
    finally:
        kubectl(
            "delete", "deployment", "kubetrain-controller", "-n", "kubetrain-system", "--ignore-not-found"
        )


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
def test_whoever_may_edit_a_namespace_may_run_training_there(kubectl: Kubectl, namespace: str) -> None:
    kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "base" / "user-roles.yaml")
    )
    kubectl("create", "serviceaccount", "airflow-worker", "-n", namespace)
    kubectl(
        "create",
        "rolebinding",
        "airflow-edit",
        "--clusterrole=edit",
        f"--serviceaccount={namespace}:airflow-worker",
        "-n",
        namespace,
    )
    kubectl("create", "serviceaccount", "dashboard", "-n", namespace)
    kubectl(
        "create",
        "rolebinding",
        "dashboard-view",
        "--clusterrole=view",
        f"--serviceaccount={namespace}:dashboard",
        "-n",
        namespace,
    )

    def can(account: str, verb: str, resource: str) -> bool:
        as_ = f"--as=system:serviceaccount:{namespace}:{account}"
        done = kubectl("auth", "can-i", verb, resource, "-n", namespace, as_, check=False)
        return done.stdout.strip() == "yes"

    # The cluster role aggregation controller folds kubetrain-edit into `edit` asynchronously.
    for _ in range(60):
        if can("airflow-worker", "create", "pytorchjobs.kubeflow.org"):
            break
        time.sleep(1)
    for resource in ("pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org"):
        assert can("airflow-worker", "create", resource), resource
        assert can("airflow-worker", "delete", resource), resource
        assert can("airflow-worker", "patch", resource), resource
        assert can("dashboard", "list", resource), resource
        assert not can("dashboard", "create", resource), resource
    assert not can("airflow-worker", "create", "clustertrainingruntimes.trainer.kubeflow.org")


SCRATCH_CLAIM = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}


async def _claim_exists(jobs: Jobs, name: str) -> bool:
    return not await _claim_going(jobs, name)


async def _claim_going(jobs: Jobs, name: str) -> bool:
    try:
        claim = await jobs.core.read_namespaced_persistent_volume_claim(name, jobs.namespace)
    except client.ApiException as exc:
        return exc.status == 404
    return claim.metadata.deletion_timestamp is not None


@pytest.mark.usefixtures("crds")
async def test_the_controller_runs_with_only_its_own_rbac(
    kubectl: Kubectl,
    controller_namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    jobs: Jobs,
    custom: client.CustomObjectsApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubetrain")  # a failure shows what the controller was doing
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "base" / "rbac.yaml"))
    token = kubectl("create", "token", "kubetrain-controller", "-n", controller_namespace).stdout.strip()
    restricted = kubeconfig_of(kubeconfig, token, tmp_path / "controller.kubeconfig")

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
        await jobs.run_to_ttl_deletion(
            "rbac", runs="2s", ttl_seconds=1, timeout=60
        )  # the TTL needs delete on jobs
        # A TrainJob too: its pods, Service and runtime snapshot carry blockOwnerDeletion, which the dev
        # cluster's OwnerReferencesPermissionEnforcement checks against trainjobs/finalizers.
        await jobs.create(training_runtime("torch", pod_annotations=runs_for("1s")))
        await jobs.create(trainjob("rbac-tj", "torch"))
        await jobs.wait_condition("rbac-tj", "Complete", kind="TrainJob", timeout=60)
        # The claims a TrainJob owns go when its runtime's ttlSecondsAfterFinished passes: delete on claims.
        claims = {"templates": [{"metadata": {"name": "scratch"}, "spec": SCRATCH_CLAIM}]}
        runtime = training_runtime(
            "scratch", pod_annotations=runs_for("4s"), ttlSecondsAfterFinished=1, volumeClaimPolicies=[claims]
        )
        await jobs.create(runtime)
        await jobs.create(trainjob("rbac-claims", "scratch"))
        await eventually(lambda: _claim_exists(jobs, "scratch-rbac-claims"), what="the TrainJob's claim")
        await jobs.wait_condition("rbac-claims", "Complete", kind="TrainJob", timeout=60)
        await eventually(
            lambda: _claim_going(jobs, "scratch-rbac-claims"),
            timeout=30,
            what="the TrainJob's claim to be deleted",
        )
        coordination = client.CoordinationV1Api(jobs.custom.api_client)
        lease = await coordination.read_namespaced_lease(f"test-{jobs.namespace}", controller_namespace)
        assert lease.spec.holder_identity
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert not task.exception()
