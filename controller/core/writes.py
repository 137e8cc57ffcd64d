"""Writes every reconciler makes the same way: children in slow-start batches, and the training report.

Shared by the v1 job and TrainJob reconcilers.

* **Expectations on every path.** A create or delete raises the job's
  expectation before the call and lowers it on every way the call can end
  without a watch event to come (an error, a 409, a cancellation), so a failed
  call never freezes the job until the expectations expire.
* **Slow start.** Children are created in batches of 1, 2, 4, ... (capped by
  the concurrency) that stop at the first error, as the Job controller does: a
  job whose pods the API server refuses (quota, an invalid template) costs one
  request per pass, not one per replica, and cannot starve every other job of
  the API budget. A pass posts one Event for what it created and one for what
  failed.
* **A 409 is not trusted.** ``AlreadyExists`` means success only when the
  object found under that name is controlled by this job. One left by an
  earlier job of the same name that is still being deleted is waited for; one
  owned by anything else is a name conflict that fails the job
  (``ChildRejectedError``) instead of leaving it waiting forever.
* **A refusal says why.** A child the API server finds invalid (422, or 400
  when it cannot even decode it) fails the job once it has happened on a few
  passes in a row: no retry can fix the template. One it forbids (403: a
  quota, a missing service account or priority class, an admission policy)
  may be allowed later, so the job keeps trying, with a ``ReplicaFailure``
  condition (as a ReplicaSet has) carrying the API server's message meanwhile.
* The training report that rank 0 leaves as its termination message is copied
  into the job's annotations.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubetrain import naming
from kubetrain.api.objects import Obj
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.events import NORMAL, WARNING, EventRecorder
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import PODS, Resource
from kubetrain.kube.runner import RetryLaterError

NAME_CONFLICT = "NameConflict"
INVALID_POD_TEMPLATE = "InvalidPodTemplate"
FAILED_CREATE = "FailedCreate"
INVALID_PASSES = 3  # passes in a row with an invalid child before the job fails


def raise_first_failure(outcomes: Sequence[object]) -> None:
    """Raise the first exception among the outcomes of a ``gather(..., return_exceptions=True)``:
    every write of the gather has ended by then, so nothing is left running behind the error."""
    failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
    if failure is not None:
        raise failure


class Ownership(enum.Enum):
    """Who holds an object that a job wants to create under the same name."""

    OURS = "ours"  # this job controls it: an earlier pass created it
    STALE = "stale"  # an earlier job of the same name (being deleted, or garbage to be collected)
    FOREIGN = "foreign"  # anything else: the name is taken
    GONE = "gone"  # nothing holds it any more


def ownership(obj: Obj | None, owner: Obj) -> Ownership:
    """Classify the object found under a child's name, relative to the job ``owner``."""
    if obj is None:
        return Ownership.GONE
    meta = obj.get("metadata") or {}
    controller = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if controller is not None and controller.get("uid") == owner["metadata"]["uid"]:
        return Ownership.OURS
    if meta.get("deletionTimestamp"):
        return Ownership.STALE
    if (
        controller is not None
        and controller.get("kind") == owner.get("kind")
        and controller.get("name") == owner["metadata"]["name"]
    ):
        return Ownership.STALE  # the garbage collector deletes it now that its owner is gone
    return Ownership.FOREIGN


def holder(obj: Obj) -> str:
    """Who controls ``obj``, for a message: ``TFJob x`` or ``no controller``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    controller = next((r for r in refs if r.get("controller")), None)
    return f"{controller.get('kind')} {controller.get('name')}" if controller else "no controller"


class ChildRejectedError(Exception):
    """The API server will not take a child of this job.

    ``reason`` is the condition's reason. ``fail_after`` is how many passes in a row this may
    happen before the job fails (1: at once); None means never: the job reports it in a
    ``ReplicaFailure`` condition and keeps trying.
    """

    def __init__(self, reason: str, message: str, *, fail_after: int | None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.fail_after = fail_after


class Rejections:
    """Per job, how many passes in a row its children were rejected: when that fails the job."""

    def __init__(self) -> None:
        self._passes: dict[str, int] = {}

    def fails_job(self, key: str, rejected: ChildRejectedError) -> bool:
        """Count this pass's rejection; True when the job must fail now."""
        if rejected.fail_after is None:
            return False
        passes = self._passes.get(key, 0) + 1
        if passes >= rejected.fail_after:
            self._passes.pop(key, None)
            return True
        self._passes[key] = passes
        return False

    def forget(self, key: str) -> None:
        self._passes.pop(key, None)


def name_conflict(resource: Resource, name: str, obj: Obj) -> ChildRejectedError:
    return ChildRejectedError(
        NAME_CONFLICT,
        f"{resource.kind} {name} already exists and belongs to {holder(obj)}, not to this job; "
        "rename the job or delete that object",
        fail_after=1,
    )


def refusal(resource: Resource, name: str, error: errors.APIError) -> ChildRejectedError | None:
    """What a create's API error means for the job, beyond a retry: invalid (fails it after a few
    passes), forbidden (a condition says so while it retries), or nothing."""
    if error.status in (400, 422):
        return ChildRejectedError(
            INVALID_POD_TEMPLATE,
            f"the API server rejects {resource.kind.lower()} {name}: {error.message}",
            fail_after=INVALID_PASSES,
        )
    if error.status == 403:
        return ChildRejectedError(
            FAILED_CREATE, f"cannot create {resource.kind.lower()} {name}: {error.message}", fail_after=None
        )
    return None


def failure_text(error: BaseException) -> str:
    """What went wrong, for an Event: the API server's message, else the error itself."""
    if isinstance(error, errors.APIError | ChildRejectedError):
        return error.message
    return str(error) or type(error).__name__


def require_ours(owner: Obj, resource: Resource, obj: Obj) -> None:
    """Raise unless the job ``owner`` controls ``obj``, found under the name of one of its children: a
    ``ChildRejectedError`` name conflict, or ``RetryLaterError`` while an earlier job's leftover goes."""
    verdict = ownership(obj, owner)
    if verdict is Ownership.FOREIGN:
        raise name_conflict(resource, obj["metadata"]["name"], obj)
    if verdict is not Ownership.OURS:
        raise RetryLaterError(
            f"{resource.kind} {obj['metadata']['name']} of an earlier job of the same name is being deleted"
        )


async def check_existing(kube: KubeClient, owner: Obj, resource: Resource, name: str) -> Obj | None:
    """After a create answered 409: the object if this job controls it; wait for a stale holder to go
    (``RetryLaterError``); a foreign holder is a ``ChildRejectedError`` name conflict."""
    namespace = owner["metadata"]["namespace"]
    found = await kube.get(resource, name, namespace)
    verdict = ownership(found, owner)
    if verdict is Ownership.OURS:
        return found
    if verdict is Ownership.FOREIGN:
        assert found is not None
        raise name_conflict(resource, name, found)
    raise RetryLaterError(f"{resource.kind} {name} of an earlier job of the same name is still being deleted")


@dataclass
class Batches:
    """Slow-start batches of creates (1, 2, 4, ... up to the concurrency) that stop after the first
    batch with a failure: what they created, what failed, and how many bodies they attempted (each
    attempted create accounts for its own expectation, however it ends)."""

    created: list[str] = field(default_factory=list)
    failures: list[tuple[str, BaseException]] = field(default_factory=list)
    attempted: int = 0

    async def run(
        self, create: Callable[[Obj], Awaitable[str | None]], bodies: list[Obj], concurrency: int
    ) -> None:
        """Create ``bodies`` with ``create`` (the name created, or None for one already there)."""
        batch = 1
        while self.attempted < len(bodies) and not self.failures:
            chunk = bodies[self.attempted : self.attempted + batch]
            self.attempted += len(chunk)
            results = await asyncio.gather(*(create(b) for b in chunk), return_exceptions=True)
            for body, result in zip(chunk, results, strict=True):
                if isinstance(result, BaseException):
                    self.failures.append((body["metadata"]["name"], result))
                elif result is not None:
                    self.created.append(result)
            batch = min(2 * batch, concurrency)


@dataclass
class ChildWriter:
    kube: KubeClient
    expectations: Expectations
    recorder: EventRecorder
    concurrency: int = 64

    async def create_all(self, owner: Obj, resource: Resource, bodies: list[Obj], *, track: bool) -> None:
        """Create children in slow-start batches; stop at the first failure and raise it."""
        if not bodies:
            return
        meta = owner["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        kind = resource.kind
        if track:
            self.expectations.expect_creations(key, len(bodies))

        create = functools.partial(self._create, owner, resource, tracked=key if track else None)
        batches = Batches()
        try:
            await batches.run(create, bodies, self.concurrency)
        finally:
            if track:
                for _ in range(len(bodies) - batches.attempted):  # no event will come for these
                    self.expectations.creation_observed(key)
        if batches.created:
            noun = kind.lower() + ("s" if len(batches.created) > 1 else "")
            self.recorder.event(
                owner, NORMAL, f"SuccessfulCreate{kind}", f"Created {noun}: {', '.join(batches.created)}"
            )
        if batches.failures:
            self._raise_failure(owner, resource, batches.failures)

    async def _create(self, owner: Obj, resource: Resource, body: Obj, *, tracked: str | None) -> str | None:
        """Create one child: its name, or None when one of that name is there already and is this job's.
        ``tracked``: the job's key when its expectations count this create."""
        name: str = body["metadata"]["name"]
        try:
            await self.kube.create(resource, body, owner["metadata"]["namespace"])
        except BaseException as exc:
            if tracked is not None:  # no add event will come for this create
                self.expectations.creation_observed(tracked)
            if isinstance(exc, errors.APIConflictError):
                await check_existing(self.kube, owner, resource, name)
                return None
            raise
        return name

    def _raise_failure(
        self, owner: Obj, resource: Resource, failures: list[tuple[str, BaseException]]
    ) -> None:
        """Post one Warning for a batch's failures (none for a cancellation) and raise the first, as a
        ``ChildRejectedError`` where the API server's refusal says what is wrong with the child."""
        name, first = failures[0]
        if not isinstance(first, asyncio.CancelledError):
            more = f" (and {len(failures) - 1} more in this batch)" if len(failures) > 1 else ""
            self.recorder.event(
                owner,
                WARNING,
                f"FailedCreate{resource.kind}",
                f"Error creating {name}: {failure_text(first)}{more}",
            )
        rejected = refusal(resource, name, first) if isinstance(first, errors.APIError) else None
        if rejected is not None:
            raise rejected from first
        raise first

    async def delete_all(self, owner: Obj, resource: Resource, objs: Iterable[Obj]) -> None:
        """Delete children in parallel (each guarded by its uid); one Event names every child deleted.

        Every delete is attempted; the first failure is raised after all have ended."""
        meta = owner["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        targets = list(objs)
        if not targets:
            return
        track = resource is PODS

        async def delete(obj: Obj) -> str | None:
            child = obj["metadata"]
            if track:
                self.expectations.expect_deletion(key, child["uid"])
            try:
                gone = await self.kube.delete(resource, child["name"], meta["namespace"], uid=child["uid"])
            except BaseException:
                if track:  # no delete event will come for this call
                    self.expectations.deletion_observed(key, child["uid"])
                raise
            if not gone and track:
                self.expectations.deletion_observed(key, child["uid"])
            return str(child["name"]) if gone else None

        results = await asyncio.gather(*(delete(o) for o in targets), return_exceptions=True)
        deleted = [r for r in results if isinstance(r, str)]
        if deleted:
            noun = resource.kind.lower() + ("s" if len(deleted) > 1 else "")
            self.recorder.event(
                owner, NORMAL, f"SuccessfulDelete{resource.kind}", f"Deleted {noun}: {', '.join(deleted)}"
            )
        raise_first_failure(results)

    async def delete_owned(self, owner: Obj, resource: Resource, cached: Obj | None) -> bool:
        """Delete a singleton child (pod group, autoscaler) only if this job controls it, by uid."""
        if cached is None or ownership(cached, owner) is not Ownership.OURS:
            return False
        meta = cached["metadata"]
        return await self.kube.delete(resource, meta["name"], meta.get("namespace"), uid=meta["uid"])

    async def copy_report(
        self, resource: Resource, jobs: Informer, job: Obj, report: dict[str, Any] | None
    ) -> None:
        """Copy rank 0's training report into the job's annotations (and an Event) when it changes.

        ``job`` is the reconcile's private copy: its metadata is replaced by the written one, so the
        status write that follows carries the new resourceVersion.
        """
        if report is None:
            return
        text = json.dumps(report, sort_keys=True, separators=(",", ":"))
        meta = job["metadata"]
        if (meta.get("annotations") or {}).get(naming.ANNOTATION_TRAINING_REPORT) == text:
            return
        annotations = {naming.ANNOTATION_TRAINING_REPORT: text}
        checkpoint = report.get("last_checkpoint") or report.get("checkpoint")
        if checkpoint:
            annotations[naming.ANNOTATION_LAST_CHECKPOINT] = str(checkpoint)
        updated = await self.kube.patch(
            resource, meta["name"], {"metadata": {"annotations": annotations}}, namespace=meta["namespace"]
        )
        jobs.observe_write(updated)
        job["metadata"] = updated["metadata"]
        summary = ", ".join(f"{k}={v}" for k, v in sorted(report.items()) if k != "metrics")
        metrics_text = ", ".join(f"{k}={v}" for k, v in sorted((report.get("metrics") or {}).items()))
        self.recorder.event(
            job,
            NORMAL,
            "TrainingReport",
            f"rank 0 reported {summary}" + (f"; metrics: {metrics_text}" if metrics_text else ""),
        )
