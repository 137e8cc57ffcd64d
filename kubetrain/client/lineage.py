"""The attempts of a training run, and what the next run of its caller does with them.

Checkpoint-aware resume makes every retry of a training run a new job (an *attempt*) that
continues from the checkpoints of the one before. Three callers start such retries: the Airflow
operators (a task retried or cleared), the KFP launchers (a step retried or run again) and
``kubetrain resume``. They must answer one question the same way -- did an earlier attempt
already start, and is it running, suspended, finished or gone? -- or a retry of one caller could
take over, resubmit or delete another caller's job. So the rules live here, once:

- **Identity.** A caller names its run by its full identity (Airflow: DAG, task, run and map
  index; KFP: pipeline run, task and job name; the CLI: the job's own lineage). Every attempt
  carries a label with a hash of it (the lookup) and the identity itself in an annotation,
  compared in full, so not even a hash collision hands one run's job to another. Readable labels
  (``kubetrain.dev/task-id``...) are for people only: label values drop characters, so ``训练``
  and ``評価``, or run ids differing only in ``:`` and ``+``, would share them.
- **Lineage.** The attempts of one identity that were asked to run one spec (a hash of the
  manifest, in an annotation) are a lineage: they share the ``kubetrain.dev/lineage`` label (the
  key of the checkpoint fence), the checkpoint dir and volume, and count ``kubetrain.dev/attempt``
  up; attempt N is named ``naming.attempt_name(lineage, N)`` (the first may keep its caller's
  name). A request with another spec is a lineage of its own, beside the first: it never
  reattaches to, resubmits or resumes a job that runs something else. Lineages of one identity
  that keep their checkpoints in the same place (directory and volume) never run at once: the
  fence orders the attempts of one lineage only, so a second writer is refused before it starts.
- **Decisions** (``decide``, pure): a running attempt is reattached to, a suspended one resumed, a
  succeeded one returned (or run again when the caller asks), a failed one followed by the next
  attempt; attempts being deleted are skipped; nothing is submitted while an attempt of the
  lineage, or of another lineage writing to the same checkpoint place, still has live pods
  (Pending or Running, also while being deleted: their processes still run until they end): the
  caller waits, bounded, with status lines in its
  log, then fails naming the pods; and nothing starts or resumes while such another lineage runs.

``find`` and ``prepare`` are the thin I/O around ``decide``; the sync ``JobClient`` runs them too.
They take any client with the few verbs ``LineageClient`` names (``AsyncJobClient`` has them), so this
module does not import the client that calls it.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import enum
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubetrain import naming
from kubetrain.client import kinds
from kubetrain.client.errors import JobExistsError, LineageError

Obj = dict[str, Any]
POD_WAIT_SECONDS = 300.0  # how long a caller waits for an earlier attempt's pods to end, by default
STATUS_EVERY = 15.0  # seconds between status lines while waiting
POLL_EVERY = 1.0
LIVE_PHASES = ("Pending", "Running")
# Written for each attempt by kubetrain or the controller: not part of what the caller asked to run.
PER_ATTEMPT = frozenset(
    {
        naming.ANNOTATION_ATTEMPT,
        naming.ANNOTATION_LAST_CHECKPOINT,
        naming.ANNOTATION_TRAINING_REPORT,
        naming.ANNOTATION_IDENTITY,
        naming.ANNOTATION_SPEC_HASH,
        naming.ANNOTATION_RESULT_DELIVERED,
        "kubectl.kubernetes.io/last-applied-configuration",
    }
)


# -- identity and spec ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    """Who runs a lineage, in full: ``text`` is canonical JSON of the caller's fields."""

    text: str

    @property
    def hash(self) -> str:
        """The value of the ``kubetrain.dev/identity-hash`` label: how attempts are found."""
        return naming.identity_hash(self.text)

    @classmethod
    def of(cls, source: str, **fields: str) -> Identity:
        document = {"source": source, **fields}
        return cls(json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":")))

    @classmethod
    def airflow(cls, dag_id: str, task_id: str, run_id: str, map_index: int | None) -> Identity:
        """One Airflow task instance (every try of it)."""
        index = -1 if map_index is None else int(map_index)
        return cls.of("airflow", dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=str(index))

    @classmethod
    def kfp(cls, run_id: str, task_name: str, job_name: str) -> Identity:
        """One KFP launcher step of one pipeline run (every retry of it)."""
        return cls.of("kfp", run_id=run_id, task_name=task_name, job_name=job_name)

    @classmethod
    def job(cls, kind: str, lineage: str) -> Identity:
        """A job submitted by hand, resumed with ``kubetrain resume``: its own lineage."""
        return cls.of("job", kind=kinds.kind_of(kind).kind, lineage=lineage)

    @classmethod
    def of_job(cls, job: Obj) -> Identity:
        """The identity an existing job belongs to: its annotation, else its own lineage."""
        text = _annotations(job).get(naming.ANNOTATION_IDENTITY)
        return cls(text) if text else cls.job(job["kind"], lineage_of(job))


def spec_hash(manifest: Obj) -> str:
    """A hash of what a manifest asks to run: kind, spec and the caller's annotations (not labels,
    not the name, not what kubetrain or the controller write per attempt)."""
    annotations = {k: v for k, v in _annotations(manifest).items() if k not in PER_ATTEMPT}
    document = {
        "apiVersion": manifest.get("apiVersion"),
        "kind": manifest.get("kind"),
        "spec": manifest.get("spec"),
        "annotations": annotations,
    }
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def checkpoint_place(obj: Obj) -> tuple[str, str]:
    """Where a job (or a manifest) keeps its checkpoints: its checkpoint dir and volume annotations."""
    annotations = _annotations(obj)
    return (
        annotations.get(naming.ANNOTATION_CHECKPOINT_DIR, ""),
        annotations.get(naming.ANNOTATION_CHECKPOINT_VOLUME, ""),
    )


def lineage_of(job: Obj) -> str:
    """A job's lineage: its ``kubetrain.dev/lineage`` label, else its name."""
    labels = job["metadata"].get("labels") or {}
    return str(labels.get(naming.LABEL_LINEAGE) or job["metadata"]["name"])


def attempt_of(job: Obj) -> int:
    """A job's ``kubetrain.dev/attempt`` (1 when it has none)."""
    try:
        return max(1, int(_annotations(job).get(naming.ANNOTATION_ATTEMPT, "1") or 1))
    except ValueError:
        return 1


def _annotations(obj: Obj) -> dict[str, str]:
    found: dict[str, str] = (obj.get("metadata") or {}).get("annotations") or {}
    return found


# -- what was found -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attempt:
    """One job of a lineage, as far as the decisions need it."""

    name: str
    number: int
    state: str  # kinds.state: Pending, Running, Restarting, Suspended, Succeeded, Failed
    lineage: str
    identity: str  # the identity text it belongs to
    spec_hash: str
    suspended: bool = False  # asked to be (the Suspended condition may not be there yet)
    deleting: bool = False
    delivered: bool = False  # the caller already returned its result once
    last_checkpoint: str = ""
    live_pods: tuple[str, ...] = ()  # "name (phase)" of its Pending or Running pods, ending ones too
    checkpoints: tuple[str, str] = ("", "")  # checkpoint_place: where it writes its checkpoints
    created: str = ""
    job: Obj = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, job: Obj, live_pods: Iterable[str] = ()) -> Attempt:
        meta = job["metadata"]
        annotations = _annotations(job)
        spec = job.get("spec") or {}
        suspend = (spec.get("runPolicy") or {}).get("suspend") if kinds.kind_of(job["kind"]).is_v1 else None
        if suspend is None:
            suspend = spec.get("suspend")
        return cls(
            name=meta["name"],
            number=attempt_of(job),
            state=kinds.state(job),
            lineage=lineage_of(job),
            identity=Identity.of_job(job).text,
            spec_hash=annotations.get(naming.ANNOTATION_SPEC_HASH) or spec_hash(job),
            suspended=bool(suspend),
            deleting=bool(meta.get("deletionTimestamp")),
            delivered=annotations.get(naming.ANNOTATION_RESULT_DELIVERED) == "true",
            last_checkpoint=annotations.get(naming.ANNOTATION_LAST_CHECKPOINT)
            or str(kinds.report(job).get("last_checkpoint") or ""),
            live_pods=tuple(live_pods),
            checkpoints=checkpoint_place(job),
            created=str(meta.get("creationTimestamp") or ""),
            job=job,
        )

    @property
    def finished(self) -> bool:
        return self.state in ("Succeeded", "Failed")

    def describe(self) -> str:
        return f"attempt {self.number} ({self.name})"


# -- the request and the decision -------------------------------------------------------------------
class Mode(enum.Enum):
    RUN = "run"  # Airflow, KFP: see the run through (reattach to an attempt that runs)
    RESUME = "resume"  # kubetrain resume: only continue a run that stopped (failed or suspended)


class Action(enum.Enum):
    START = "start"  # submit the lineage's first attempt (or the first after ones being deleted)
    REATTACH = "reattach"  # wait for the current attempt (returns at once when it succeeded)
    RESUME = "resume"  # let a suspended attempt run again, then wait for it
    RESUBMIT = "resubmit"  # submit the next attempt: same spec and checkpoints, attempt + 1
    WAIT = "wait"  # an attempt still has live pods: look again later
    ERROR = "error"  # nothing to do that the caller asked for


@dataclass(frozen=True)
class Request:
    """What a caller wants: run (or resume) the lineage of ``identity`` that runs ``spec_hash``."""

    identity: Identity
    kind: str
    namespace: str
    base_lineage: str  # the readable lineage name of this identity's first lineage
    spec_hash: str
    template: Obj  # what a new attempt is made from: the caller's manifest, or the job to resume
    first_name: str = ""  # the name of attempt 1 ("": naming.attempt_name(lineage, 1))
    mode: Mode = Mode.RUN
    rerun_succeeded: bool = False  # a succeeded lineage whose result was delivered runs again
    unsuspend: bool = False  # the template is an earlier job: its copy must not start suspended


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    lineage: str = ""
    number: int = 0  # the attempt to reattach to or resume, or the one to submit
    name: str = ""  # its job's name
    current: Attempt | None = None  # the attempt reattached to or resumed, or the one before a new one
    last_checkpoint: str = ""  # for a new attempt: where it resumes from ("" : the dir's latest)
    waiting_on: tuple[str, ...] = ()  # WAIT: the live pods


def decide(request: Request, attempts: Sequence[Attempt]) -> Decision:
    """What the caller does next, given the attempts found for its identity (any lineage, any state)."""
    run = _Run.of(request, attempts)
    current = run.current
    if current is None:
        return run.start()
    if current.suspended and not current.finished:
        return run.resume(current)
    if not current.finished:
        return run.reattach(current)
    if current.state == "Succeeded":
        return run.succeeded(current)
    return run.failed(current)


@dataclass(frozen=True)
class _Run:
    """What ``decide`` reads off the attempts found: the request's lineage, its current attempt and
    the next one, and what stands in the way of starting one."""

    request: Request
    lineage: str
    lineage_attempts: list[Attempt]  # of the request's spec
    others: list[Attempt]  # of this identity, another spec
    current: Attempt | None  # the newest attempt of the lineage not being deleted
    number: int  # the next attempt's
    name: str  # the next attempt's job name
    place: tuple[str, str]  # where the lineage writes checkpoints: directory and volume
    rival: Attempt | None  # another spec's attempt that runs, writing to the same place
    pods: tuple[str, ...]  # live pods of earlier attempts that a new one waits for
    checkpoint: str  # where a new attempt resumes from ("": the directory's latest)

    @classmethod
    def of(cls, request: Request, attempts: Sequence[Attempt]) -> _Run:
        ours = [a for a in attempts if a.identity == request.identity.text]
        lineage_attempts = [a for a in ours if a.spec_hash == request.spec_hash]
        others = [a for a in ours if a.spec_hash != request.spec_hash]
        lineage = (
            max(lineage_attempts, key=_order).lineage
            if lineage_attempts
            else lineage_name(request.base_lineage, request.spec_hash, others)
        )
        alive = [a for a in lineage_attempts if not a.deleting]
        number = max((a.number for a in lineage_attempts), default=0) + 1
        name = (
            request.first_name
            if number == 1 and request.first_name and lineage == request.base_lineage
            else naming.attempt_name(lineage, number)
        )
        place = checkpoint_place(request.template)
        neighbours = [a for a in others if place[0] and a.checkpoints == place]  # same dir, same volume
        newest_first = sorted(lineage_attempts, key=_order, reverse=True)
        return cls(
            request=request,
            lineage=lineage,
            lineage_attempts=lineage_attempts,
            others=others,
            current=max(alive, key=_order) if alive else None,
            number=number,
            name=name,
            place=place,
            rival=next((a for a in neighbours if not (a.finished or a.deleting or a.suspended)), None),
            pods=tuple(p for a in sorted([*lineage_attempts, *neighbours], key=_order) for p in a.live_pods),
            checkpoint=next(
                (a.last_checkpoint for a in newest_first if a.last_checkpoint),
                _annotations(request.template).get(naming.ANNOTATION_LAST_CHECKPOINT, ""),
            ),
        )

    def _error(self, reason: str) -> Decision:
        return Decision(Action.ERROR, reason, self.lineage)

    def _with(self, action: Action, reason: str, attempt: Attempt) -> Decision:
        """``action`` on an attempt there is: reattach to it or resume it."""
        return Decision(action, reason, self.lineage, attempt.number, attempt.name, attempt)

    def _where(self, attempt: Attempt) -> str:
        return f"{kinds.kind_of(self.request.kind).kind} {self.request.namespace}/{attempt.name}"

    def _refused_beside(self, rival: Attempt) -> Decision:
        place, volume = self.place
        return self._error(
            f"{rival.describe()} of this run runs another spec and is {rival.state}, writing checkpoints to "
            f"{place}{f' on volume {volume}' if volume else ''}: nothing of this spec starts beside "
            f"it; wait for it to end, or delete {self._where(rival)}"
        )

    def _submit(self, action: Action, reason: str) -> Decision:
        """``action`` with a new attempt, once nothing stands in its way."""
        if self.rival is not None:
            return self._refused_beside(self.rival)
        if self.pods:
            return Decision(
                Action.WAIT,
                f"{reason}; first waiting for the pods of earlier attempts to end: {', '.join(self.pods)}",
                self.lineage,
                self.number,
                self.name,
                self.current,
                self.checkpoint,
                self.pods,
            )
        return Decision(action, reason, self.lineage, self.number, self.name, self.current, self.checkpoint)

    def start(self) -> Decision:
        """No attempt of the lineage is left (or none was ever made)."""
        if self.request.mode is Mode.RESUME:
            return self._error(f"no attempt of lineage {self.lineage} is left to resume")
        if self.lineage_attempts:
            reason = (
                f"the earlier attempts ({', '.join(a.name for a in self.lineage_attempts)}) are being deleted: "
                f"submitting attempt {self.number} ({self.name})"
            )
        elif self.others:
            reason = (
                f"the earlier attempts of this run ({', '.join(a.name for a in self.others)}) ran another spec: "
                f"starting lineage {self.lineage} with {self.name}"
            )
        else:
            reason = f"no earlier attempt of this run: submitting {self.name}"
        return self._submit(Action.START, reason)

    def resume(self, current: Attempt) -> Decision:
        if self.rival is not None:
            return self._refused_beside(self.rival)
        return self._with(Action.RESUME, f"{current.describe()} is suspended: resuming it", current)

    def reattach(self, current: Attempt) -> Decision:
        if self.request.mode is Mode.RESUME:
            return self._error(
                f"{self._where(current)} is {current.state}: only Suspended or Failed jobs resume"
            )
        return self._with(
            Action.REATTACH, f"{current.describe()} is {current.state}: reattaching to it", current
        )

    def succeeded(self, current: Attempt) -> Decision:
        if self.request.mode is Mode.RESUME:
            return self._error(f"{self._where(current)} is Succeeded: only Suspended or Failed jobs resume")
        if self.request.rerun_succeeded and current.delivered:
            return self._submit(
                Action.RESUBMIT,
                f"{current.describe()} succeeded and its result was returned before, so this run was "
                f"cleared: training again as attempt {self.number} ({self.name})",
            )
        return self._with(
            Action.REATTACH, f"{current.describe()} already succeeded: returning its result", current
        )

    def failed(self, current: Attempt) -> Decision:
        reason, _ = kinds.failure(current.job) if current.job else ("Failed", "")
        return self._submit(
            Action.RESUBMIT,
            f"{current.describe()} failed ({reason or 'Failed'}): submitting attempt {self.number} ({self.name}) "
            f"with the same checkpoint dir, resuming from {self.checkpoint or 'the latest checkpoint there'}",
        )


def lineage_name(base: str, spec: str, others: Iterable[Attempt]) -> str:
    """The lineage name for a spec no attempt ran yet: ``base``, unless a lineage of another spec of
    the same identity has it (then ``base`` with the spec hash)."""
    taken = {a.lineage for a in others}
    if base not in taken:
        return base
    return naming.dns_label(f"{base}-{spec[:8]}")


def _order(attempt: Attempt) -> tuple[int, str]:
    return attempt.number, attempt.created


# -- manifests of new attempts ----------------------------------------------------------------------
def attempt_manifest(
    template: Obj,
    *,
    identity: Identity,
    lineage: str,
    number: int,
    name: str,
    namespace: str,
    spec: str,
    last_checkpoint: str = "",
    labels: dict[str, str] | None = None,
    unsuspend: bool = False,
) -> Obj:
    """Attempt ``number`` of a lineage, made from ``template`` (a manifest, or an earlier attempt)."""
    meta = template.get("metadata") or {}
    annotations = {k: v for k, v in _annotations(template).items() if k not in PER_ATTEMPT}
    annotations.update(
        {
            naming.ANNOTATION_ATTEMPT: str(number),
            naming.ANNOTATION_IDENTITY: identity.text,
            naming.ANNOTATION_SPEC_HASH: spec,
        }
    )
    if last_checkpoint:
        annotations[naming.ANNOTATION_LAST_CHECKPOINT] = last_checkpoint
    body_spec = copy.deepcopy(template["spec"])
    if unsuspend:
        if kinds.kind_of(template["kind"]).is_v1:
            body_spec.setdefault("runPolicy", {})["suspend"] = False
        else:
            body_spec["suspend"] = False
    return {
        "apiVersion": template["apiVersion"],
        "kind": template["kind"],
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **(meta.get("labels") or {}),
                naming.LABEL_LINEAGE: lineage,
                naming.LABEL_IDENTITY_HASH: identity.hash,
                **(labels or {}),
            },
            "annotations": annotations,
        },
        "spec": body_spec,
    }


def successor(job: Obj, *, name: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    """The next attempt after ``job``: same spec, checkpoint dir and volume, lineage and identity;
    attempt + 1; resuming from the last checkpoint ``job`` reported."""
    attempt = Attempt.of(job)
    return attempt_manifest(
        job,
        identity=Identity.of_job(job),
        lineage=attempt.lineage,
        number=attempt.number + 1,
        name=name or naming.attempt_name(attempt.lineage, attempt.number + 1),
        namespace=job["metadata"]["namespace"],
        spec=attempt.spec_hash,
        last_checkpoint=attempt.last_checkpoint,
        labels=labels,
        unsuspend=True,
    )


def resume_request(job: Obj) -> Request:
    """``kubetrain resume JOB``: continue the lineage ``job`` belongs to, from its latest attempt."""
    attempt = Attempt.of(job)
    return Request(
        identity=Identity.of_job(job),
        kind=job["kind"],
        namespace=job["metadata"]["namespace"],
        base_lineage=attempt.lineage,
        spec_hash=attempt.spec_hash,
        template=job,
        mode=Mode.RESUME,
        unsuspend=True,
    )


# -- I/O ----------------------------------------------------------------------------------------
class LineageClient(Protocol):
    """What ``find`` and ``prepare`` ask of a client: ``AsyncJobClient``'s verbs of those names."""

    async def list(
        self, *, kind: str | None = None, namespace: str | None = None, label_selector: str | None = None
    ) -> builtins.list[Obj]: ...

    async def pods_matching(self, namespace: str, label_selector: str) -> builtins.list[Any]: ...

    async def get(self, kind: str, name: str, namespace: str) -> Obj | None: ...

    async def create(self, manifest: Obj, *, namespace: str | None = None) -> Obj: ...

    async def set_suspended(self, kind: str, name: str, namespace: str, suspended: bool) -> Obj: ...


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` did, and the job the caller waits for (or returns, when it succeeded)."""

    decision: Decision
    job: Obj


async def find(
    client: LineageClient, kind: str, namespace: str, identity: Identity, *, include: Sequence[Obj] = ()
) -> list[Attempt]:
    """Every job labelled with ``identity``'s hash (plus ``include``), with its live pods."""
    selector = f"{naming.LABEL_IDENTITY_HASH}={identity.hash}"
    jobs = await client.list(kind=kind, namespace=namespace, label_selector=selector)
    seen = {j["metadata"].get("uid") for j in jobs}
    jobs += [j for j in include if j["metadata"].get("uid") not in seen]
    if not jobs:
        return []
    live = await _live_pods(client, kind, namespace, jobs)
    return [Attempt.of(job, live.get(job["metadata"].get("uid", ""), ())) for job in jobs]


async def _live_pods(
    client: LineageClient, kind: str, namespace: str, jobs: Sequence[Obj]
) -> dict[str, tuple[str, ...]]:
    """Pending or Running pods, by the uid of the job owning them.

    A pod being deleted counts until it is gone: its processes run until they have stopped (a training
    script saving its last checkpoint on SIGTERM takes a while), and the kubelet removes the pod only
    then, as the Job controller's ``podReplacementPolicy: Failed`` waits for terminating pods."""
    key = naming.LABEL_JOB_NAME if kinds.kind_of(kind).is_v1 else naming.JOBSET_NAME
    names = ",".join(sorted({j["metadata"]["name"] for j in jobs}))
    listed = await client.pods_matching(namespace, f"{key} in ({names})")
    uids = {j["metadata"].get("uid") for j in jobs}
    live: dict[str, list[str]] = {}
    for pod in listed:
        if pod.status.phase not in LIVE_PHASES:
            continue
        for owner in pod.metadata.owner_references or []:
            if owner.uid in uids:
                phase = "Terminating" if pod.metadata.deletion_timestamp else pod.status.phase
                live.setdefault(owner.uid, []).append(f"{pod.metadata.name} ({phase})")
    return {uid: tuple(sorted(pods)) for uid, pods in live.items()}


async def prepare(
    client: LineageClient,
    request: Request,
    *,
    log: Callable[[str], None] = print,
    pod_wait: float = POD_WAIT_SECONDS,
    include: Sequence[Obj] = (),
) -> Prepared:
    """Find the attempts, decide, and act: returns the job to wait for. Waits (at most ``pod_wait``
    seconds, a status line every STATUS_EVERY) while an earlier attempt still has live pods; raises
    ``LineageError`` when there is nothing to do or the pods outlive the wait."""
    deadline = time.monotonic() + pod_wait
    last_status = -STATUS_EVERY
    while True:
        attempts = await find(client, request.kind, request.namespace, request.identity, include=include)
        decision = decide(request, attempts)
        if decision.action is Action.ERROR:
            raise LineageError(decision.reason)
        if decision.action is Action.WAIT:
            now = time.monotonic()
            if now >= deadline:
                raise LineageError(
                    f"not submitting attempt {decision.number} of lineage {decision.lineage}: pods of earlier "
                    f"attempts are still running after {pod_wait:.0f}s: {', '.join(decision.waiting_on)}; "
                    "delete them (or their jobs) and run again",
                    action="wait",
                    pods=decision.waiting_on,
                )
            if now - last_status >= STATUS_EVERY:
                log(decision.reason)
                last_status = now
            await asyncio.sleep(min(POLL_EVERY, max(deadline - now, 0.0)))
            continue
        job = await _act(client, request, decision)
        if job is None:  # a job of that name appeared meanwhile, and it is one of ours: decide again
            await asyncio.sleep(POLL_EVERY / 10)
            continue
        log(decision.reason)
        return Prepared(decision, job)


async def _act(client: LineageClient, request: Request, decision: Decision) -> Obj | None:
    current = decision.current
    if decision.action is Action.REATTACH and current is not None:
        return current.job
    if decision.action is Action.RESUME and current is not None:
        return await client.set_suspended(request.kind, current.name, request.namespace, False)
    body = attempt_manifest(
        request.template,
        identity=request.identity,
        lineage=decision.lineage,
        number=decision.number,
        name=decision.name,
        namespace=request.namespace,
        spec=request.spec_hash,
        last_checkpoint=decision.last_checkpoint,
        unsuspend=request.unsuspend,
    )
    try:
        return await client.create(body, namespace=request.namespace)
    except JobExistsError:
        existing = await client.get(request.kind, decision.name, request.namespace)
        if existing is not None and Identity.of_job(existing) == request.identity:
            return None  # another try of the same run got there first
        raise LineageError(
            f"cannot submit {decision.name}: a {request.kind} of that name already exists in "
            f"{request.namespace} and belongs to another run (its {naming.ANNOTATION_IDENTITY} differs); "
            "give this run's job another name"
        ) from None
