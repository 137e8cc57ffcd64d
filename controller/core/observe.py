"""What a job's pods say: counts per replica type, restarts, failures and the training report.

Pure functions over the cached pods, so the decisions of a reconcile can be
unit-tested without a cluster.

Failure semantics (docs/job-lifecycle.md):

* a Failed pod whose replica restarts (``OnFailure``, ``Always``, or
  ``ExitCode`` with a retryable code >= 128, or a pod killed before its
  container ever ran) is deleted and recreated: one restart;
* a container the kubelet restarted in place raised ``restartCount``: one
  restart per increment;
* any other Failed pod (``Never``, or ``ExitCode`` with a code from 1 to 127)
  fails the job;
* a container that exited with ``kubetrain.checkpoint``'s fenced-off code (a
  newer attempt of the job owns the checkpoint directory) fails the job at
  once, whatever the restart policy: restarting it could only be refused again.

Every restart counts against ``runPolicy.backoffLimit``, whatever the policy,
except a disruption: a pod the cluster stops for reasons of its own (its
``DisruptionTarget`` condition: preempted, evicted, drained, its node gone) is
recreated whatever its restart policy and counted in ``disruptions`` instead;
a peer that failed once the disruption began is recreated uncounted too
(``failed_in_disruption``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubetrain.api.objects import Obj
from kubetrain.checkpoint import EXIT_FENCED
from kubetrain.client.kinds import disruption, disruption_condition
from kubetrain.controller.core.children import replica_of
from kubetrain.controller.v1.frameworks.base import JobInfo, PodsByReplica, ReplicaCounts

FENCED = "Fenced"  # the job failure reason when a newer attempt fenced its pods off
NO_EXIT_CODE = 0xBEEF  # the pod failed before its container reported an exit code (upstream's sentinel)


@dataclass(frozen=True)
class Disrupted:
    """A pod of the job that the cluster is stopping (its ``DisruptionTarget`` condition)."""

    replica_type: str
    pod: Obj
    condition: Obj

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])

    @property
    def why(self) -> str:
        return disruption(self.pod) or "DisruptionTarget"


@dataclass
class Observation:
    """The pods of one job, digested."""

    pods: PodsByReplica = field(default_factory=dict)
    counts: dict[str, ReplicaCounts] = field(default_factory=dict)
    to_restart: list[tuple[str, Obj]] = field(default_factory=list)
    to_recreate: list[Obj] = field(default_factory=list)  # failed by a disruption: recreated uncounted
    permanent_failures: list[tuple[str, Obj, int]] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)  # names of pods fenced off their checkpoint dir
    out_of_range: list[Obj] = field(default_factory=list)
    disrupted: list[Disrupted] = field(default_factory=list)  # live or terminating
    terminating: set[tuple[str, int]] = field(default_factory=set)
    pod_failures: dict[str, int] = field(default_factory=dict)  # uid -> restarts of the pod so far
    report: dict[str, Any] | None = None


def exit_code(pod: Obj, container_name: str) -> int:
    """Exit code of the named container (or the first terminated one), else the sentinel."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") != container_name)
    for status in ordered:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", NO_EXIT_CODE))
    return NO_EXIT_CODE


def fenced_off(pod: Obj) -> bool:
    """Whether a container of the pod exited as fenced off its checkpoint directory (now or before
    an in-place restart)."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        for state in (status.get("state"), status.get("lastState")):
            if ((state or {}).get("terminated") or {}).get("exitCode") == EXIT_FENCED:
                return True
    return False


def fenced_failure(kind: str, name: str, pods: list[str]) -> tuple[str, str] | None:
    """The (reason, message) of a job whose pods a newer attempt fenced off its checkpoint directory."""
    if not pods:
        return None
    return (
        FENCED,
        f"{kind} {name} has failed because a newer attempt of the job owns its checkpoint directory: "
        f"{', '.join(pods)} exited with code {EXIT_FENCED} (fenced off)",
    )


def restart_count(pod: Obj) -> int:
    status = pod.get("status", {})
    return sum(
        int(s.get("restartCount") or 0)
        for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    )


def is_retryable(policy: str, code: int) -> bool:
    """Whether a failed replica with this restart policy and exit code is restarted."""
    if policy in ("OnFailure", "Always"):
        return True
    return policy == "ExitCode" and code >= 128


def termination_report(pod: Obj, container_name: str | None = None) -> dict[str, Any] | None:
    """The JSON training report a container (any, without a name) left as its termination message
    (current or previous run)."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if container_name is not None and status.get("name") != container_name:
            continue
        for state in (status.get("state"), status.get("lastState")):
            message = ((state or {}).get("terminated") or {}).get("message")
            if not message:
                continue
            try:
                report = json.loads(message)
            except ValueError:
                continue
            if isinstance(report, dict):
                return report
    return None


def disrupted_since(pods: Iterable[Obj]) -> str | None:
    """When the earliest disruption among ``pods`` began (its ``DisruptionTarget`` transition)."""
    times = [str(c.get("lastTransitionTime") or "") for c in map(disruption_condition, pods) if c]
    return min((t for t in times if t), default=None)


def failed_in_disruption(pod: Obj, since: str | None) -> bool:
    """Whether ``pod`` ran when a peer was disrupted (at ``since``) and failed from then on: the ranks of
    a distributed job fail at their next collective without the disrupted one, which may come before
    the controller has seen the disruption and deleted them. Such a failure is the disruption's, not
    the pod's, as it would be had the delete come first. (API timestamps are RFC 3339 in whole seconds
    and UTC, so they compare as strings; a failure in the disruption's own second counts as its.)"""
    if since is None or str(pod["metadata"].get("creationTimestamp") or "") > since:
        return False
    for status in pod.get("status", {}).get("containerStatuses") or []:
        finished = ((status.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if finished and str(finished) >= since:
            return True
    return False


def observe(info: JobInfo, pods: list[Obj]) -> Observation:
    """Digest the job's pods (already filtered to those it controls)."""
    result = Observation()
    since = disrupted_since(pod for pod in pods if replica_of(pod) is not None)
    by_type: dict[str, dict[str, int]] = {}
    for pod in pods:
        identity = replica_of(pod)
        if identity is None:
            continue
        rtype_label, index = identity
        rtype = _replica_type(info, rtype_label)
        if rtype is None:
            result.out_of_range.append(pod)
            continue
        replica = info.replicas[rtype]
        disrupted = disruption_condition(pod)
        if disrupted is not None:
            result.disrupted.append(Disrupted(rtype, pod, disrupted))
        if pod["metadata"].get("deletionTimestamp"):
            result.terminating.add((rtype, index))
            continue
        if index >= replica.replicas:
            result.out_of_range.append(pod)
            continue
        result.pods[(rtype, index)] = pod
        counts = by_type.setdefault(rtype, {"active": 0, "succeeded": 0, "failed": 0})
        _file(result, info, rtype, pod, counts, disrupted=disrupted is not None, since=since)
    result.counts = {t: ReplicaCounts(**c) for t, c in by_type.items()}
    # Also from a pod being deleted: the controller stops a failed job's pods, and rank 0 writes its
    # report (the last checkpoint) as it exits.
    result.report = rank0_report(info, pods)
    return result


def _file(
    result: Observation,
    info: JobInfo,
    rtype: str,
    pod: Obj,
    counts: dict[str, int],
    *,
    disrupted: bool,
    since: str | None,
) -> None:
    """File a pod of the replica set by its phase: counted in ``counts`` (the replica type's), fenced off
    a checkpoint, and its failures (restarts, and one more for a Failed pod that will be restarted)."""
    if fenced_off(pod):
        result.fenced.append(pod["metadata"]["name"])
    failures = restart_count(pod)
    phase = pod.get("status", {}).get("phase")
    if phase == "Running":
        counts["active"] += 1
    elif phase == "Succeeded":
        counts["succeeded"] += 1
    elif phase == "Failed":
        counts["failed"] += 1
        disrupted_too = disrupted or failed_in_disruption(pod, since)
        failures += _failed(result, info, rtype, pod, disrupted=disrupted_too)
    if failures:
        result.pod_failures[pod["metadata"]["uid"]] = failures


def _failed(result: Observation, info: JobInfo, rtype: str, pod: Obj, *, disrupted: bool) -> int:
    """File a Failed pod as one to recreate, restart or fail the job for; the restarts that adds."""
    code = exit_code(pod, info.framework.api.default_container)
    if disrupted:
        result.to_recreate.append(pod)  # not a failure of the pod: no restart counted
    elif is_retryable(info.replicas[rtype].restart_policy, code):
        result.to_restart.append((rtype, pod))
        return 1  # the pod will be recreated: one more restart
    else:
        result.permanent_failures.append((rtype, pod, code))
    return 0


def rank0_report(info: JobInfo, pods: Iterable[Obj]) -> dict[str, Any] | None:
    """The training report rank 0 (the framework's master role) left among ``pods``, if any."""
    report = None
    for pod in pods:
        identity = replica_of(pod)
        rtype = _replica_type(info, identity[0]) if identity is not None else None
        if (
            identity is not None
            and rtype is not None
            and info.framework.is_master_role(info, rtype, identity[1])
        ):
            report = termination_report(pod, info.framework.api.default_container) or report
    return report


def _replica_type(info: JobInfo, label: str) -> str | None:
    """The job's replica type whose label value (lower case) is ``label``."""
    return next((t for t in info.replicas if t.lower() == label), None)
