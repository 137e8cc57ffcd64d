"""Leaving the upstream operators, as a migration does: their CRDs are refused at start-up with the fix,
and a webhook they left behind is named. On a cluster of its own: the webhook would refuse every job."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubetrain.devcluster import build
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from tests.conftest import REPO
from tests.docs_commands import documented
from tests.support import ControllerHandle, pytorchjob


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("preflight") / "cluster")
    dev.up(ClusterOptions(gpu_nodes=0, cpu_nodes=1, process_node=False))
    try:
        yield dev
    finally:
        dev.down()


def kubectl(cluster: DevCluster, *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        [str(build.binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    ("kind", "upstream", "crd"),
    [
        ("PyTorchJob", build.UPSTREAM_TRAINING_OPERATOR, "kubeflow.org_pytorchjobs.yaml"),
        ("TrainJob", build.UPSTREAM_TRAINER, "trainer.kubeflow.org_trainjobs.yaml"),
    ],
)
async def test_upstreams_crds_are_refused_at_start_up_and_kubetrains_are_taken(
    cluster: DevCluster, kind: str, upstream: tuple[str, str], crd: str
) -> None:
    # All of the release's CRDs of that API group (a TrainJob needs the runtimes' too).
    crds = build.module_source(*upstream) / "manifests/base/crds"
    for path in sorted(crds.glob(f"{crd.split('_', maxsplit=1)[0]}_*.yaml")):
        kubectl(cluster, "apply", "--server-side", "-f", str(path))
    controller = ControllerHandle(cluster.kubeconfig, kinds=(kind,))
    with pytest.raises(SystemExit) as refused:
        await controller.start()
    await controller.stop()
    message = str(refused.value)
    plural, group = crd.removesuffix(".yaml").split("_")[1], crd.split("_", maxsplit=1)[0]
    assert message.startswith(f"CRD {plural}.{group} (version "), message
    assert "is not kubetrain's: its status schema lacks status." in message, message
    assert "install kubetrain's CRDs: kubectl apply --server-side -f deploy/crds/" in message
    # As the message says: kubetrain's CRDs replace upstream's, and the controller reconciles the kind.
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "crds"))
    await controller.start()
    try:
        assert controller.manager is not None
        assert [runner.name for runner in controller.manager.runners] == [kind.lower()]
    finally:
        await controller.stop()


def upstream_webhook() -> dict[str, Any]:
    """The validating webhooks upstream's v1 install registers, as its standalone overlay names them."""
    source = build.module_source(*build.UPSTREAM_TRAINING_OPERATOR) / "manifests/base/webhook/manifests.yaml"
    (configuration,) = [d for d in yaml.safe_load_all(source.read_text()) if d]
    configuration["metadata"]["name"] = "validator.training-operator.kubeflow.org"
    for hook in configuration["webhooks"]:
        hook["clientConfig"]["service"].update(namespace="kubeflow", name="training-operator")
    return dict(configuration)


async def test_a_webhook_left_by_the_upstream_operator_is_named_with_the_fix(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "crds"))
    kubectl(cluster, "create", "namespace", "kubeflow")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        "spec": {"ports": [{"port": 443, "targetPort": 9443}], "selector": {"app": "gone"}},
    }
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(service))
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(upstream_webhook()))
    # What users meet: the upstream Deployment is gone, so every job is refused.
    job = yaml.safe_dump(
        {**pytorchjob("blocked", workers=0), "metadata": {"name": "blocked", "namespace": "default"}}
    )
    refused = kubectl(cluster, "create", "-f", "-", stdin=job, check=False)
    assert 'failed calling webhook "validator.pytorchjob.training-operator.kubeflow.org"' in refused, refused
    controller = ControllerHandle(cluster.kubeconfig, kinds=("PyTorchJob",))
    with caplog.at_level("WARNING", logger="kubetrain.controller.preflight"):
        await controller.start()
    await controller.stop()
    (warning,) = [
        r.getMessage() for r in caplog.records if "ValidatingWebhookConfiguration" in r.getMessage()
    ][:1]
    assert "validator.training-operator.kubeflow.org" in warning and "kubeflow/training-operator" in warning
    fix = warning.rsplit(": ", 1)[1]
    assert fix == documented("docs/migrating.md", "kubectl delete validatingwebhookconfiguration")
    kubectl(cluster, *fix.split()[1:])
    assert "created" in kubectl(cluster, "create", "-f", "-", stdin=job)
