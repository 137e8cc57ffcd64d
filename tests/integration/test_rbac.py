"""What each install lets the controller do, asked of the API server's own authorizer.

For every way to install (the kustomize base, the namespaced overlay, the Helm chart with and without
``watchNamespace``, the MPI extra bound in one namespace) the install's RBAC is applied under names of
its own, and a ``SubjectAccessReview`` (what ``kubectl auth can-i --as`` asks) checks each verb the
controller uses, where it must be allowed, and what it must never get: Secrets, pods elsewhere than
the namespace it watches, exec, nodes. Then the controller runs a job's whole lifecycle with only the
namespaced install's rights.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from kubetrain.controller.main import Options, run
from kubetrain.devcluster import build
from tests.conftest import REPO, Kubectl
from tests.support import Jobs, kubeconfig_of, runs_for, training_runtime, trainjob

Obj = dict[str, Any]
RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}
CONTROLLERS = ("kubetrain-controller", "kubetrain-leader-election")  # names of the controller's RBAC
WATCHED = "training"  # the namespace the namespaced overlay and the chart's watchNamespace name
# Every (verb, group, resource) the controller uses in a job's namespace ...
IN_JOB_NAMESPACES = [
    *[
        (verb, "kubeflow.org", plural)
        for plural in ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs")
        for verb in ("get", "list", "watch", "patch", "delete")
    ],
    *[(verb, "kubeflow.org", "pytorchjobs/status") for verb in ("get", "patch", "update")],
    ("update", "kubeflow.org", "pytorchjobs/finalizers"),
    *[(verb, "trainer.kubeflow.org", "trainjobs") for verb in ("get", "list", "watch", "patch", "delete")],
    *[(verb, "trainer.kubeflow.org", "trainjobs/status") for verb in ("get", "patch", "update")],
    ("update", "trainer.kubeflow.org", "trainjobs/finalizers"),
    *[(verb, "trainer.kubeflow.org", "trainingruntimes") for verb in ("get", "list", "watch")],
    *[
        (verb, "", resource)
        for resource in ("pods", "services")
        for verb in ("get", "list", "watch", "create", "delete")
    ],
    *[(verb, "", "configmaps") for verb in ("get", "list", "watch", "create", "patch")],
    *[(verb, "", "persistentvolumeclaims") for verb in ("get", "create", "delete")],
    ("create", "", "events"),
    ("patch", "", "events"),
    *[(verb, "autoscaling", "horizontalpodautoscalers") for verb in ("get", "create", "patch", "delete")],
    *[
        (verb, "scheduling.volcano.sh", "podgroups")
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ],
]
# ... and cluster-wide, whatever the install.
CLUSTER_WIDE = [
    *[(verb, "trainer.kubeflow.org", "clustertrainingruntimes") for verb in ("get", "list", "watch")],
    ("get", "apiextensions.k8s.io", "customresourcedefinitions"),
    ("list", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("list", "discovery.k8s.io", "endpointslices"),
    ("create", "authentication.k8s.io", "tokenreviews"),
]
SECRETS_FOR_MPI = [("get", "", "secrets"), ("create", "", "secrets")]
SECRETS_NEVER_LISTED = [("list", "", "secrets"), ("watch", "", "secrets")]
NEVER = [
    ("create", "", "pods/exec"),
    ("update", "", "pods"),
    ("get", "", "nodes"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
]


def rendered_kustomize(kubectl: Kubectl, target: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(kubectl("kustomize", str(REPO / target)).stdout) if d]


def rendered_chart(*values: str) -> list[Obj]:
    args = [a for v in values for a in ("--set", v)]
    done = subprocess.run(
        [
            str(build.binary_path("helm")),
            "template",
            "kubetrain",
            str(REPO / "deploy" / "chart"),
            "-n",
            "kubetrain-system",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def isolated(documents: Iterable[Obj], suffix: str, account_namespace: str, watched: str) -> list[Obj]:
    """The install's RBAC under names of its own (``-<suffix>``), for a ServiceAccount in
    ``account_namespace``, with the watched namespace ``watched``: installs side by side on one cluster
    never grant each other's accounts anything."""
    out = []
    for original in documents:
        if original["kind"] not in RBAC_KINDS or not original["metadata"]["name"].startswith(CONTROLLERS):
            continue  # the user roles and the SDK's ConfigMap reader grant the controller nothing
        doc = yaml.safe_load(yaml.safe_dump(original))
        meta = doc["metadata"]
        meta["name"] = f"{meta['name']}-{suffix}"
        if "namespace" in meta:
            meta["namespace"] = watched if meta["namespace"] == WATCHED else account_namespace
        if "roleRef" in doc:
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
        for subject in doc.get("subjects") or []:
            if subject["kind"] == "ServiceAccount":
                subject["name"], subject["namespace"] = f"{subject['name']}-{suffix}", account_namespace
        out.append(doc)
    return out


def apply(kubectl: Kubectl, documents: list[Obj]) -> None:
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(documents))


def delete(kubectl: Kubectl, documents: list[Obj]) -> None:
    kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(documents))


class Asker:
    """``kubectl auth can-i --as=system:serviceaccount:<namespace>:<name>``, as SubjectAccessReviews."""

    def __init__(self, api: client.AuthorizationV1Api, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name

    async def can(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        plural, _, sub = resource.partition("/")
        attributes = {"verb": verb, "group": group, "resource": plural, "subresource": sub or None}
        if namespace is not None:
            attributes["namespace"] = namespace
        review = await self.api.create_subject_access_review(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": f"system:serviceaccount:{self.namespace}:{self.name}",
                    "groups": [
                        "system:serviceaccounts",
                        f"system:serviceaccounts:{self.namespace}",
                        "system:authenticated",
                    ],
                    "resourceAttributes": attributes,
                },
            }
        )
        return bool(review.status.allowed)

    async def wrong(
        self, rows: list[tuple[str, str, str]], namespace: str | None, expected: bool
    ) -> list[str]:
        """The rows whose answer is not ``expected``, as ``verb group/resource in namespace``."""
        answers = await asyncio.gather(*(self.can(verb, group, res, namespace) for verb, group, res in rows))
        return [
            f"{verb} {group}/{res} in {namespace or 'the cluster'}"
            for (verb, group, res), a in zip(rows, answers, strict=True)
            if a != expected
        ]


@pytest.fixture
def authorization(core: client.CoreV1Api) -> client.AuthorizationV1Api:
    return client.AuthorizationV1Api(core.api_client)


@pytest.fixture
async def other_namespace(core: client.CoreV1Api) -> Any:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await core.create_namespace({"metadata": {"name": name, "labels": {"kubetrain.dev/test": "true"}}})
    yield name
    await core.delete_namespace(name)


INSTALLS = {
    "kustomize base": (lambda kubectl: rendered_kustomize(kubectl, "deploy/base"), False, False),
    "namespaced overlay": (
        lambda kubectl: rendered_kustomize(kubectl, "deploy/overlays/namespaced"),
        True,
        False,
    ),
    "chart": (lambda kubectl: rendered_chart(), False, False),
    "chart, watchNamespace and mpiSshKeys": (
        lambda kubectl: rendered_chart(f"watchNamespace={WATCHED}", "mpiSshKeys=true"),
        True,
        True,
    ),
}


@pytest.mark.parametrize("install", list(INSTALLS))
async def test_each_install_grants_what_the_controller_uses_and_nothing_it_must_not_have(
    install: str,
    kubectl: Kubectl,
    authorization: client.AuthorizationV1Api,
    namespace: str,
    other_namespace: str,
) -> None:
    render, namespaced, mpi = INSTALLS[install]
    suffix = uuid.uuid4().hex[:8]
    documents = isolated(render(kubectl), suffix, namespace, watched=namespace)
    apply(kubectl, documents)
    try:
        asker = Asker(authorization, namespace, f"kubetrain-controller-{suffix}")
        wrong = await asker.wrong(IN_JOB_NAMESPACES + CLUSTER_WIDE, namespace, True)
        wrong += await asker.wrong(CLUSTER_WIDE, None, True)
        wrong += await asker.wrong(IN_JOB_NAMESPACES, other_namespace, not namespaced)
        if namespaced:
            wrong += await asker.wrong(IN_JOB_NAMESPACES, None, False)
        wrong += await asker.wrong(NEVER + SECRETS_NEVER_LISTED, namespace, False)
        wrong += await asker.wrong(NEVER + SECRETS_FOR_MPI + SECRETS_NEVER_LISTED, other_namespace, False)
        wrong += await asker.wrong(SECRETS_FOR_MPI, namespace, mpi)
        assert not wrong, f"{install}: answered the other way: {wrong}"
    finally:
        delete(kubectl, documents)


async def test_the_mpi_extra_bound_in_one_namespace_grants_its_secrets_there_only(
    kubectl: Kubectl, authorization: client.AuthorizationV1Api, namespace: str, other_namespace: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    documents = isolated(
        rendered_kustomize(kubectl, "deploy/extras/mpi-ssh-keys"), suffix, namespace, namespace
    )
    (role,) = documents
    account = f"kubetrain-controller-{suffix}"
    apply(kubectl, documents)
    try:
        kubectl("create", "serviceaccount", account, "-n", namespace)
        # As the extra's comment says: one RoleBinding per namespace that runs MPI TrainJobs.
        kubectl(
            "create",
            "rolebinding",
            "kubetrain-mpi-ssh-keys",
            f"--clusterrole={role['metadata']['name']}",
            f"--serviceaccount={namespace}:{account}",
            "-n",
            namespace,
        )
        asker = Asker(authorization, namespace, account)
        wrong = await asker.wrong(SECRETS_FOR_MPI, namespace, True)
        wrong += await asker.wrong(SECRETS_NEVER_LISTED, namespace, False)
        wrong += await asker.wrong(SECRETS_FOR_MPI + SECRETS_NEVER_LISTED, other_namespace, False)
        wrong += await asker.wrong(SECRETS_FOR_MPI, None, False)
        assert not wrong, f"answered the other way: {wrong}"
    finally:
        delete(kubectl, documents)


@pytest.mark.usefixtures("crds")
async def test_the_controller_runs_a_jobs_lifecycle_with_only_the_namespaced_install(
    kubectl: Kubectl,
    kubeconfig: Path,
    tmp_path: Path,
    jobs: Jobs,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubetrain")  # a failure shows what the controller was doing
    suffix = uuid.uuid4().hex[:8]
    documents = isolated(
        rendered_kustomize(kubectl, "deploy/overlays/namespaced"), suffix, jobs.namespace, jobs.namespace
    )
    apply(kubectl, documents)
    try:
        account = f"kubetrain-controller-{suffix}"
        token = kubectl("create", "token", account, "-n", jobs.namespace).stdout.strip()
        restricted = kubeconfig_of(kubeconfig, token, tmp_path / "controller.kubeconfig")
        options = Options(
            kubeconfig=str(restricted),
            namespace=jobs.namespace,
            leader_elect=True,
            leader_election_namespace=jobs.namespace,
            leader_election_id=f"test-{suffix}",
            metrics_bind_address="0",
            health_probe_bind_address="0",
        )
        stop = asyncio.Event()
        task = asyncio.create_task(run(options, stop=stop))
        try:
            await jobs.run_to_ttl_deletion("namespaced", runs="2s", ttl_seconds=1, timeout=60)
            await jobs.create(training_runtime("torch", pod_annotations=runs_for("1s")))
            await jobs.create(trainjob("namespaced-tj", "torch"))
            await jobs.wait_condition("namespaced-tj", "Complete", kind="TrainJob", timeout=60)
            refused = [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage().lower()]
            assert not refused, f"the API server refused the controller: {refused}"
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        assert not task.exception()
    finally:
        delete(kubectl, documents)
