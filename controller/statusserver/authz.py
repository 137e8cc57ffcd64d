"""Who may report a job's progress: pure decisions over a URL path, a TokenReview and a pod.

A report is a POST to ``<job's API path>/status`` (Kubeflow Trainer's URL, and the same shape for
the v1 kinds) with a projected ServiceAccount token whose audience is that path. The server asks
the API server (TokenReview, with that audience) who the token is, then decides here:

* 401 when the token is not valid for this path's audience;
* 403 when it is valid but not bound to a live pod that this job controls (the pod named in the
  token's ``authentication.kubernetes.io/pod-name`` extra, with the uid in ``pod-uid``, whose
  controller owner reference is the job, by uid: a pod an earlier job of the same name left does
  not qualify): any pod may ask for a token of any audience, so the audience alone proves nothing
  about the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kubetrain.api.kinds import JOBS, JobKind

Obj = dict[str, Any]
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
_PATH = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)/([^/]+)/status$")


@dataclass(frozen=True)
class Target:
    """The job a report is for, read from its URL path."""

    kind: JobKind
    namespace: str
    name: str

    @property
    def path(self) -> str:
        return status_path(self.kind, self.namespace, self.name)


def status_path(kind: JobKind, namespace: str, name: str) -> str:
    """The URL path (and token audience) of one job's reports."""
    return kind.resource.path(namespace, name, "status")


def target_of(path: str) -> Target | None:
    """The job a report's URL path names, or None when it names no job kind."""
    match = _PATH.match(path)
    if match is None:
        return None
    group, version, namespace, plural, name = match.groups()
    for kind in JOBS:
        if (kind.group, kind.version, kind.plural) == (group, version, plural):
            return Target(kind, namespace, name)
    return None


@dataclass(frozen=True)
class Verdict:
    """The answer to a report: an HTTP status and why."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


def _extra(user: Obj, key: str) -> str | None:
    values = (user.get("extra") or {}).get(key) or []
    return str(values[0]) if values else None


def bound_pod(review: Obj, target: Target) -> tuple[str, str] | Verdict:
    """The (name, uid) of the pod a reviewed token is bound to, or the verdict refusing it."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return Verdict(401, f"token not valid: {status.get('error') or 'not authenticated'}")
    if target.path not in (status.get("audiences") or []):
        return Verdict(401, f"token not valid for audience {target.path}")
    user = status.get("user") or {}
    name, uid = _extra(user, POD_NAME_EXTRA), _extra(user, POD_UID_EXTRA)
    if not name or not uid:
        return Verdict(403, "token is not bound to a pod")
    if not str(user.get("username", "")).startswith(f"system:serviceaccount:{target.namespace}:"):
        return Verdict(403, f"token is not of a service account in namespace {target.namespace}")
    return name, uid


def authorise(target: Target, uid: str, pod: Obj | None, *, job_uid: str) -> Verdict:
    """Whether the pod a token is bound to (``uid``; ``pod`` as read, None if gone) may report for the
    job (``job_uid``: the uid of the job of that name now): a pod left by an earlier job of the same
    name may not."""
    if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
        return Verdict(403, "the token's pod no longer exists")
    meta = pod["metadata"]
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    kind = target.kind
    if (
        meta.get("namespace") != target.namespace
        or owner is None
        or (owner.get("apiVersion"), owner.get("kind"), owner.get("name"), owner.get("uid"))
        != (kind.api_version, kind.kind, target.name, job_uid)
    ):
        return Verdict(403, f"pod {meta.get('name')} does not belong to {kind.kind} {target.name}")
    return Verdict(200, "ok")
