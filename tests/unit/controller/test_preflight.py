"""What the controller refuses or warns about at start-up: CRDs that would drop its bookkeeping, and
validating webhooks on the jobs that nobody answers."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kubetrain.api import crdgen
from kubetrain.controller.preflight import crd_problem, stale_webhooks

OURS = {name: yaml.safe_load(text) for name, text in crdgen.render_all().items()}


@pytest.mark.parametrize("name", sorted(OURS))
def test_kubetrains_own_crds_hold_everything_the_controller_writes(name: str) -> None:
    assert crd_problem(OURS[name]) is None


def without_status_fields(crd: dict[str, Any], *fields: str) -> dict[str, Any]:
    trimmed = copy.deepcopy(crd)
    for version in trimmed["spec"]["versions"]:
        properties = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        for field in fields:
            properties.pop(field, None)
    return trimmed


def crd_named(suffix: str) -> dict[str, Any]:
    return next(crd for name, crd in OURS.items() if name.endswith(suffix))


def test_a_crd_that_would_prune_the_restart_bookkeeping_is_refused_with_the_fix() -> None:
    upstream_like = without_status_fields(crd_named("pytorchjobs.yaml"), "restartCount", "countedPodRestarts")
    problem = crd_problem(upstream_like)
    assert problem is not None
    assert problem.startswith("CRD pytorchjobs.kubeflow.org (version v1) is not kubetrain's")
    assert "lacks status.restartCount, status.countedPodRestarts" in problem
    assert "kubectl apply --server-side -f deploy/crds/" in problem
    trainjob = crd_problem(without_status_fields(crd_named("trainjobs.yaml"), "restarts", "jobFailures"))
    assert trainjob is not None and "status.restarts, status.jobFailures" in trainjob
    # A status that keeps unknown fields keeps ours too.
    preserving = copy.deepcopy(upstream_like)
    preserving["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert crd_problem(preserving) is None


def webhook(name: str, groups: list[str], service: tuple[str, str], policy: str = "Fail") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"validator.{name}",
                "failurePolicy": policy,
                "clientConfig": {"service": {"namespace": service[0], "name": service[1]}},
                "rules": [{"apiGroups": groups, "resources": ["*"]}],
            }
        ],
    }


def endpoints(namespace: str, service: str, *, ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}],
    }


def test_a_webhook_on_the_jobs_with_no_ready_endpoint_is_named_with_the_fix() -> None:
    left = webhook(
        "validator.training-operator.kubeflow.org", ["kubeflow.org"], ("kubeflow", "training-operator")
    )
    (warning,) = stale_webhooks([left], [endpoints("kubeflow", "training-operator", ready=False)])
    assert "ValidatingWebhookConfiguration validator.training-operator.kubeflow.org" in warning
    assert "calls Service kubeflow/training-operator, which has no ready endpoint" in warning
    assert "refuses every create and update of the jobs it covers (kubeflow.org)" in warning
    assert warning.endswith(
        "kubectl delete validatingwebhookconfiguration validator.training-operator.kubeflow.org"
    )
    assert stale_webhooks([left], [endpoints("kubeflow", "training-operator", ready=True)]) == []
    assert stale_webhooks([left], [endpoints("other", "training-operator", ready=True)]) != []
    trainer = webhook(
        "validator.trainer.kubeflow.org", ["trainer.kubeflow.org"], ("kubeflow-system", "t"), "Ignore"
    )
    (ignored,) = stale_webhooks([trainer], [])
    assert "is skipped for the jobs it covers (trainer.kubeflow.org)" in ignored
    unrelated = webhook("cert-manager-webhook", ["cert-manager.io"], ("cert-manager", "webhook"))
    assert stale_webhooks([unrelated], []) == []
