"""The Helm chart renders what deploy/ holds, takes its values, rejects bad ones, and the API server accepts it."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from kubetrain.devcluster import build
from tests.conftest import REPO
from tests.docs_commands import run_documented

CHART = REPO / "deploy" / "chart"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(build.binary_path("helm")), *args], capture_output=True, text=True, check=False, timeout=120
    )


def render(*values: str) -> list[dict[str, Any]]:
    args = [a for v in values for a in ("--set", v)]
    done = helm("template", "kubetrain", str(CHART), "--namespace", "kubetrain-system", *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def controller_args(documents: list[dict[str, Any]]) -> list[str]:
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_the_chart_lints() -> None:
    done = helm("lint", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


def test_defaults_match_the_kustomize_install() -> None:
    documents = render()
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in documents)
    assert kinds == [
        "ClusterRole/kubetrain-controller",
        "ClusterRole/kubetrain-controller-cluster",
        "ClusterRole/kubetrain-edit",
        "ClusterRole/kubetrain-view",
        "ClusterRoleBinding/kubetrain-controller",
        "ClusterRoleBinding/kubetrain-controller-cluster",
        "ConfigMap/kubeflow-trainer-public",
        "Deployment/kubetrain-controller",
        "Namespace/kubeflow-system",
        "Role/kubeflow-trainer-public",
        "Role/kubetrain-leader-election",
        "RoleBinding/kubeflow-trainer-public",
        "RoleBinding/kubetrain-leader-election",
        "Service/kubetrain-controller",
        "Service/kubetrain-controller-metrics",
        "ServiceAccount/kubetrain-controller",
    ]
    standalone = list(
        yaml.safe_load_all((REPO / "deploy" / "overlays" / "standalone" / "trainer-public.yaml").read_text())
    )
    for expected in standalone:
        rendered = next(
            d
            for d in documents
            if (d["kind"], d["metadata"]["name"]) == (expected["kind"], expected["metadata"]["name"])
        )
        for key in ("data", "rules", "roleRef", "subjects"):
            assert rendered.get(key) == expected.get(key), (expected["kind"], key)
    assert not any(d["kind"] == "ConfigMap" for d in render("trainerPublic.enabled=false"))
    role = next(
        d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kubetrain-controller"
    )
    assert not any("secrets" in rule["resources"] for rule in role["rules"])
    base = yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text())
    for expected in (d for d in base if d["kind"] in ("ClusterRole", "ClusterRoleBinding")):
        rendered = next(
            d
            for d in documents
            if (d["kind"], d["metadata"]["name"]) == (expected["kind"], expected["metadata"]["name"])
        )
        assert rendered.get("rules") == expected.get("rules"), expected["metadata"]["name"]
        assert rendered.get("roleRef") == expected.get("roleRef"), expected["metadata"]["name"]
    user_roles = list(yaml.safe_load_all((REPO / "deploy" / "base" / "user-roles.yaml").read_text()))
    for expected in user_roles:
        rendered = next(d for d in documents if d["metadata"]["name"] == expected["metadata"]["name"])
        assert rendered["rules"] == expected["rules"]
        assert expected["metadata"]["labels"].items() <= rendered["metadata"]["labels"].items()
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "kubetrain/kubetrain:0.1.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "--leader-elect" in container["args"] and "--managed-by=compatible" in container["args"]
    assert "--status-server-url=https://kubetrain-controller.kubetrain-system.svc:8082" in container["args"]
    assert not any(
        a.startswith("--status-server") for a in controller_args(render("statusServer.enabled=false"))
    )


def test_values_reach_the_controller() -> None:
    documents = render(
        "image.tag=0.2.0",
        "replicas=1",
        "leaderElection.enabled=false",
        "gangSchedulerName=kubernetes",
        "managedBy=kubetrain",
        "kinds={PyTorchJob,TrainJob}",
        "mpiSshKeys=true",
    )
    args = controller_args(documents)
    assert "--leader-elect" not in args
    assert "--gang-scheduler-name=kubernetes" in args and "--managed-by=kubetrain" in args
    assert [a for a in args if a.startswith("--enable-scheme")] == [
        "--enable-scheme=PyTorchJob",
        "--enable-scheme=TrainJob",
    ]
    assert not any(d["metadata"]["name"] == "kubetrain-leader-election" for d in documents)
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    assert any("secrets" in rule["resources"] for rule in role["rules"])


def test_watch_namespace_binds_the_controllers_role_in_that_namespace_only() -> None:
    documents = render("watchNamespace=team-a")
    assert "--namespace=team-a" in controller_args(documents)
    bindings = {(d["kind"], d["metadata"]["name"]): d for d in documents if d["kind"].endswith("Binding")}
    assert ("ClusterRoleBinding", "kubetrain-controller") not in bindings
    namespaced = bindings[("RoleBinding", "kubetrain-controller")]
    assert namespaced["metadata"]["namespace"] == "team-a"
    assert namespaced["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "kubetrain-controller",
    }
    assert ("ClusterRoleBinding", "kubetrain-controller-cluster") in bindings
    assert not any(a.startswith("--namespace") for a in controller_args(render()))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("managedBy=everything", "managedBy must be compatible or kubetrain"),
        ("leaderElection.enabled=false", "replicas > 1 needs leaderElection.enabled"),
        ("replicas=0", "replicas must be at least 1"),
    ],
)
def test_bad_values_are_refused_with_the_fix(value: str, message: str) -> None:
    done = helm("template", "kubetrain", str(CHART), "--set", value)
    assert done.returncode != 0 and message in done.stderr


def test_helm_install_as_documented_is_accepted_by_the_api_server(shell: dict[str, str], crds: None) -> None:
    # A dry run, so that the cluster keeps no release.
    # --take-ownership: the kustomize install of the same objects may be on the shared cluster.
    dry = {"--create-namespace": "--create-namespace --dry-run=server --take-ownership"}
    plain = run_documented(
        "docs/installing.md",
        "helm install kubetrain deploy/chart -n kubetrain-system --create-namespace",
        env=shell,
        replace=dry,
    ).stdout
    assert "STATUS: pending-install" in plain and 'image: "kubetrain/kubetrain:0.1.0"' in plain
    custom = run_documented(
        "docs/installing.md",
        "helm install kubetrain deploy/chart -n kubetrain-system --create-namespace --set",
        env=shell,
        replace=dry,
    ).stdout
    assert "STATUS: pending-install" in custom
    assert 'image: "registry.example.com/ml/kubetrain:0.1.0"' in custom
    assert "--gang-scheduler-name=volcano" in custom
