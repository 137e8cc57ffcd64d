"""What the controller checks about the cluster before it reconciles: things that would silently break it.

* **Foreign CRDs.** The controller keeps its restart bookkeeping in status fields of its own
  (``v1.JobStatus.bookkeeping``, ``v2.TrainJobStatus.bookkeeping``). Upstream's CRDs do not have them,
  and the API server prunes fields a schema does not declare: a job would stay ``Restarting`` after
  its first restart and never reach its backoff limit. So a kind whose installed CRD would prune them
  is refused at start-up, with the command that installs kubetrain's CRDs.
* **Webhooks with nobody behind them.** Upstream's installs register validating webhooks for the
  jobs (``failurePolicy: Fail``). Once upstream's Deployment is stopped, every create of a job is
  refused by the API server. The controller warns at start-up, naming the webhook and the fix.

The checks are pure functions of what was read; ``check`` reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from kubetrain.api import kinds, v1, v2
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import CRDS, ENDPOINT_SLICES, VALIDATING_WEBHOOKS, Resource

log = logging.getLogger(__name__)
Obj = dict[str, Any]
INSTALL_CRDS = "kubectl apply --server-side -f deploy/crds/ (or helm upgrade with the kubetrain chart's CRDs)"
JOB_GROUPS = (kinds.KUBEFLOW_GROUP, kinds.TRAINER_GROUP)


def bookkeeping_of(group: str, kind: str) -> tuple[str, ...]:
    """The status fields the controller keeps its bookkeeping in, for a kind (none for runtimes)."""
    if group == kinds.KUBEFLOW_GROUP:
        return v1.JobStatus.bookkeeping
    if group == kinds.TRAINER_GROUP and kind == kinds.TRAINJOB.kind:
        return v2.TrainJobStatus.bookkeeping
    return ()


def crd_problem(crd: Obj) -> str | None:
    """Why the installed ``crd`` cannot hold what the controller writes, or None."""
    spec = crd.get("spec") or {}
    name = (crd.get("metadata") or {}).get("name", "")
    wanted = bookkeeping_of(spec.get("group", ""), (spec.get("names") or {}).get("kind", ""))
    if not wanted:
        return None
    for version in spec.get("versions") or []:
        if not version.get("storage"):
            continue
        status = (
            ((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties", {}).get("status")
        )
        status = status or {}
        if status.get("x-kubernetes-preserve-unknown-fields"):
            return None
        missing = [field for field in wanted if field not in (status.get("properties") or {})]
        if missing:
            return (
                f"CRD {name} (version {version.get('name')}) is not kubetrain's: its status schema lacks "
                f"{', '.join('status.' + f for f in missing)}, where the controller counts restarts, so the "
                f"API server would drop them and backoff limits would never be reached; install kubetrain's "
                f"CRDs: {INSTALL_CRDS}"
            )
    return None


def stale_webhooks(configurations: Iterable[Obj], slices: Sequence[Obj]) -> list[str]:
    """A warning for each validating webhook on the training jobs whose Service has no ready endpoint."""
    ready = {
        (s["metadata"]["namespace"], (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name"))
        for s in slices
        if any(((e.get("conditions") or {}).get("ready") is not False) for e in s.get("endpoints") or [])
    }
    warnings = []
    for configuration in configurations:
        for hook in configuration.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            service = (hook.get("clientConfig") or {}).get("service")
            if not (groups & {*JOB_GROUPS, "*"}) or not service:
                continue
            if (service.get("namespace"), service.get("name")) in ready:
                continue
            policy = hook.get("failurePolicy", "Fail")
            effect = "refuses every create and update of" if policy == "Fail" else "is skipped for"
            warnings.append(
                f"ValidatingWebhookConfiguration {configuration['metadata']['name']} (webhook {hook.get('name')}) "
                f"calls Service {service.get('namespace')}/{service.get('name')}, which has no ready endpoint: "
                f"the API server {effect} the jobs it covers ({', '.join(sorted(groups))}). If it is left from "
                "an upstream operator that no longer runs, delete it: kubectl delete "
                f"validatingwebhookconfiguration {configuration['metadata']['name']}"
            )
    return warnings


async def require_our_crd(kube: KubeClient, resource: Resource) -> bool:
    """Whether ``resource``'s CRD is installed; raises SystemExit when it is a CRD that would prune the
    controller's bookkeeping (``crd_problem``)."""
    crd = await kube.get(CRDS, str(resource))
    if crd is None:
        return False
    problem = crd_problem(crd)
    if problem is not None:
        raise SystemExit(problem)
    return True


async def warn_about_webhooks(kube: KubeClient) -> list[str]:
    """Log (and return) ``stale_webhooks``; a cluster that lets the controller read neither is skipped."""
    try:
        configurations, _ = await kube.list(VALIDATING_WEBHOOKS)
        slices, _ = await kube.list(ENDPOINT_SLICES)
    except errors.APIError as exc:
        log.info("not checking for webhooks left by upstream operators: %s", exc)
        return []
    warnings = stale_webhooks(configurations, slices)
    for warning in warnings:
        log.warning("%s", warning)
    return warnings
