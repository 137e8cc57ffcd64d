"""Lease-based leader election that never leaves a wedged or a double leader.

Only one replica of the controller may act at a time. This module keeps a
``coordination.k8s.io/v1`` Lease over the controller's own ``KubeClient``
verbs; it does not wrap ``kubernetes_asyncio``'s ``LeaderElection`` because
that library's control flow is the problem: it runs the leader's work inside a
task nobody awaits (a start that fails is lost while the lease keeps being
renewed, so nothing reconciles and the pod looks healthy), its lease calls
have no timeout (a half-open connection stalls a renew forever, so an old
leader never learns that a follower took over) and connection errors escape
its loop as crashes. Here the caller owns the leading work and its errors
(``controller/main.py`` supervises it); the elector only keeps the Lease.

The rules are client-go's:

* A follower judges expiry by its own monotonic clock, from the moment it
  first observed the current record, never from the ``renewTime`` another
  machine wrote (clocks differ between nodes).
* Writes are optimistic: an update carries the ``resourceVersion`` it was
  decided on, so of two replicas racing for an expired Lease one wins and the
  other gets a 409 and looks again later.
* A takeover increments ``leaseTransitions``; a renew keeps ``acquireTime``.

And what keeps the old and the new leader from acting at once:

* Every lease call is one attempt (no hidden client retries) bounded by half
  the renew deadline, or by what is left of it. Connection errors, timeouts,
  5xx and conflicts all count as a failed attempt.
* The leader gives up (``LeadershipLostError``) once it has gone ``renew_deadline``
  seconds, on the monotonic clock, since the start of its last successful
  renew, or at once when it reads another holder in the Lease.
* A write fence (``LeaderElector.fence``, installed as ``KubeClient``'s write
  guard) refuses every write from that same moment on, before the request
  leaves the process. A replica frozen by SIGSTOP or a long pause therefore
  resumes to find its writes refused instead of racing the new leader.
  Because ``renew_deadline < lease_duration``, the old leader has stopped
  writing before any follower can consider the Lease expired.
* A graceful stop hands the Lease over (empty holder, 1 s duration), so a
  follower takes over at its next poll instead of after a full lease.

The decision itself (``decide``) is a pure function of the observed record,
when it was first observed, this replica's identity and the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp

from kubetrain.kube import errors, observer
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import LEASES

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# What a lease call may fail with and still count as nothing worse than a failed attempt.
ATTEMPT_FAILURES = (errors.APIError, TimeoutError, aiohttp.ClientError, ValueError, KeyError)


class LeadershipLostError(Exception):
    """This replica no longer holds the Lease (or can no longer be sure it does)."""


def identity() -> str:
    """This replica's identity in the Lease: the pod name (hostname) plus a random suffix."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Timings:
    """How long a lease lasts, how long a leader may go without renewing, and how often replicas try.

    The defaults are controller-runtime's. ``renew_deadline < lease_duration`` is what makes the old
    leader stop before a follower may take over; the difference is the margin for a write already on
    its way when the deadline passes.
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_period:g}s, {self.renew_deadline:g}s, {self.lease_duration:g}s)"
            )

    @property
    def lease_seconds(self) -> int:
        """The Lease's ``leaseDurationSeconds`` (whole seconds, rounded up: never shorter than asked)."""
        return math.ceil(self.lease_duration)

    @property
    def call_timeout(self) -> float:
        """The longest one lease call may take: two tries fit in one renew deadline."""
        return self.renew_deadline / 2


# -- the record and the decision (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election fields of a Lease's spec."""

    holder: str = ""
    duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> LeaseRecord:
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> Obj:
        spec: Obj = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Observation:
    """A Lease record as this replica saw it, and when (monotonic) it first saw exactly this record."""

    record: LeaseRecord
    resource_version: str
    observed_at: float


def observe(
    previous: Observation | None, record: LeaseRecord, resource_version: str, now: float
) -> Observation:
    """The new observation after reading ``record`` at ``now``.

    An unchanged record keeps the moment it was first seen: a holder that stopped renewing expires
    ``duration_seconds`` after that, by this replica's clock.
    """
    if previous is not None and previous.record == record:
        return replace(previous, resource_version=resource_version)
    return Observation(record, resource_version, now)


class Action(enum.Enum):
    ACQUIRE = "acquire"  # write the record: this replica takes the Lease (create it, or take it over)
    RENEW = "renew"  # write the record: this replica already holds the Lease
    WAIT = "wait"  # another replica holds a Lease that has not expired by this replica's clock


@dataclass(frozen=True)
class Decision:
    action: Action
    record: LeaseRecord | None = None  # what to write, for ACQUIRE and RENEW
    expires_in: float = 0.0  # for WAIT: seconds until the holder's Lease expires by this replica's clock


def decide(
    observed: Observation | None, *, identity: str, now: float, wall: datetime, lease_seconds: int
) -> Decision:
    """What this replica does with the Lease it just read (``None``: there is no Lease yet)."""
    stamp = micro_time(wall)
    if observed is None:
        return Decision(Action.ACQUIRE, LeaseRecord(identity, lease_seconds, stamp, stamp, 0))
    current = observed.record
    if current.holder == identity:
        renewed = replace(current, duration_seconds=lease_seconds, renew_time=stamp)
        if renewed.acquire_time is None:
            renewed = replace(renewed, acquire_time=stamp)
        return Decision(Action.RENEW, renewed)
    expires_at = observed.observed_at + current.duration_seconds
    if current.holder and expires_at > now:
        return Decision(Action.WAIT, expires_in=expires_at - now)
    taken = LeaseRecord(identity, lease_seconds, stamp, stamp, current.transitions + 1)
    return Decision(Action.ACQUIRE, taken)


def released(current: LeaseRecord, wall: datetime) -> LeaseRecord:
    """The record that hands the Lease over: no holder, expiring in a second, transitions kept."""
    stamp = micro_time(wall)
    return LeaseRecord("", 1, stamp, stamp, current.transitions)


# -- the Lease on the API server --------------------------------------------------------------------------
class LeaseStore(Protocol):
    """Where the Lease lives. Every call is a single attempt; failures raise (see ``ATTEMPT_FAILURES``)."""

    async def get(self) -> tuple[LeaseRecord, str] | None: ...

    async def create(self, record: LeaseRecord) -> str: ...

    async def update(self, record: LeaseRecord, resource_version: str) -> str: ...

    async def close(self) -> None: ...


class KubeLeaseStore:
    """A Lease through a ``KubeClient`` of its own: lease calls share no rate limit and no connection
    with the reconcilers, so a flood of writes or a stuck connection cannot starve a renew."""

    def __init__(self, kube: KubeClient, name: str, namespace: str, *, timeout: float) -> None:
        self.kube = kube
        self.name = name
        self.namespace = namespace
        self.timeout = timeout
        self._last: Obj = {}

    @classmethod
    async def connect(
        cls, kubeconfig: str | None, name: str, namespace: str, *, timeout: float
    ) -> KubeLeaseStore:
        return cls(await KubeClient.from_kubeconfig(kubeconfig), name, namespace, timeout=timeout)

    async def _call(self, method: str, path: str, body: Obj | None = None) -> Obj:
        return await self.kube.request(
            method, path, body=body, resource=str(LEASES), timeout=self.timeout, retries=0
        )

    def _keep(self, lease: Obj) -> str:
        self._last = lease
        return str(lease["metadata"]["resourceVersion"])

    async def get(self) -> tuple[LeaseRecord, str] | None:
        try:
            lease = await self._call("GET", LEASES.path(self.namespace, self.name))
        except errors.APINotFoundError:
            return None
        return LeaseRecord.from_spec(lease.get("spec") or {}), self._keep(lease)

    async def create(self, record: LeaseRecord) -> str:
        body = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        }
        return self._keep(await self._call("POST", LEASES.path(self.namespace), body))

    async def update(self, record: LeaseRecord, resource_version: str) -> str:
        metadata = {**(self._last.get("metadata") or {}), "name": self.name, "namespace": self.namespace}
        body = {
            **self._last,
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {**metadata, "resourceVersion": resource_version},
            "spec": record.to_spec(),
        }
        return self._keep(await self._call("PUT", LEASES.path(self.namespace, self.name), body))

    async def close(self) -> None:
        await self.kube.close()


# -- the elector --------------------------------------------------------------------------------------------
def _utc_now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Acquire the Lease, keep it, release it; and tell the client when writes must stop."""

    def __init__(
        self,
        store: LeaseStore,
        *,
        identity: str,
        timings: Timings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        lease: str = "",
    ) -> None:
        self.store = store
        self.identity = identity
        self.timings = timings
        self.lease = lease  # for log lines
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self.observation: Observation | None = None
        self.renewed_at: float | None = None  # when the last successful acquire or renew began
        self.leading = False
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self._waiting_on = ""
        self.failure = ""  # why the last attempt failed ("" when it did not)

    # -- one attempt ----------------------------------------------------------------------------------
    def _deadline_passed(self) -> bool:
        return self.renewed_at is None or self._clock() - self.renewed_at >= self.timings.renew_deadline

    def _time_left(self) -> float:
        if self.renewed_at is None:
            return 0.0
        return self.renewed_at + self.timings.renew_deadline - self._clock()

    async def _attempt(self, budget: float) -> Decision | None:
        """Read the Lease, decide, write if the decision says so; None when the attempt failed.

        A leader never writes anything but a renew, and never once its renew deadline has passed.
        """
        started = self._clock()
        try:
            async with asyncio.timeout(budget):
                found = await self.store.get()
                now = self._clock()
                self.observation = None if found is None else observe(self.observation, *found, now)
                decision = decide(
                    self.observation,
                    identity=self.identity,
                    now=now,
                    wall=self._wall(),
                    lease_seconds=self.timings.lease_seconds,
                )
                if decision.action is Action.WAIT or (self.leading and decision.action is not Action.RENEW):
                    return decision
                if self.leading and self._deadline_passed():
                    return None
                assert decision.record is not None
                if self.observation is None:
                    version = await self.store.create(decision.record)
                else:
                    version = await self.store.update(decision.record, self.observation.resource_version)
        except ATTEMPT_FAILURES as exc:
            self.failure = _describe(exc)
            if self.leading:
                log.warning("lease %s: renew attempt failed: %s", self.lease, self.failure)
            return None
        self.failure = ""
        self.observation = Observation(decision.record, version, self._clock())
        self.renewed_at = started
        return decision

    # -- the loops -----------------------------------------------------------------------------------
    async def acquire(self) -> None:
        """Return once this replica holds the Lease; try every retry period until then.

        While another replica holds an unexpired Lease, look again as soon as it would expire by this
        replica's clock (and at least every retry period, to notice a release).
        """
        retry = self.timings.retry_period
        reported = ""
        while True:
            decision = await self._attempt(self.timings.call_timeout)
            if decision is not None and decision.action is not Action.WAIT:
                self._became_leader()
                return
            if self.failure and self.failure != reported:
                # Once per distinct reason: a Lease this replica may not read or write (RBAC, a missing
                # namespace) otherwise leaves a controller that waits forever and says nothing.
                log.warning("lease %s: cannot acquire it yet: %s", self.lease, self.failure)
            reported = self.failure
            pause = retry
            if decision is not None:
                pause = min(retry, decision.expires_in)
                holder = self.observation.record.holder if self.observation else ""
                if holder != self._waiting_on:
                    self._waiting_on = holder
                    log.info("lease %s is held by %s; waiting", self.lease, holder)
            await self._sleep(pause)

    def _became_leader(self) -> None:
        self.leading = True
        observer.current().leading(True)
        assert self.observation is not None
        log.info(
            "became leader: lease %s, identity %s, transitions %d",
            self.lease,
            self.identity,
            self.observation.record.transitions,
        )

    async def keep_leading(self) -> None:
        """Renew every retry period; raise ``LeadershipLostError`` when the renew deadline passes without a
        successful renew, or when the Lease names another holder."""
        retry = self.timings.retry_period
        try:
            while True:
                await self._sleep(min(retry, max(0.0, self._time_left())))
                left = self._time_left()
                if left <= 0 or self.lost.is_set():
                    raise LeadershipLostError(self.lost_reason or self._overdue())
                decision = await self._attempt(min(self.timings.call_timeout, left))
                if decision is not None and decision.action is not Action.RENEW:
                    holder = self.observation.record.holder if self.observation else ""
                    raise LeadershipLostError(f"the Lease is now held by {holder or 'nobody'}")
        except Exception as exc:  # a bug in renewing must end the leadership too, not just the loop
            self._lose(str(exc) if isinstance(exc, LeadershipLostError) else f"renewing failed: {exc!r}")
            raise

    def _overdue(self) -> str:
        return f"no successful renew in the last {self.timings.renew_deadline:g}s"

    def _lose(self, reason: str) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.leading = False
        observer.current().leading(False)
        self.lost.set()
        log.error("lost the leader lease %s: %s", self.lease, reason)

    # -- the fence -----------------------------------------------------------------------------------
    def fence(self) -> str | None:
        """Why a write must not leave the process now, or None when it may.

        Refuses from the moment the renew deadline passes, whatever the renew loop is doing (it may
        not have run yet after the process was frozen), and marks the leadership lost.
        """
        if self.lost.is_set():
            return f"not the leader any more ({self.lost_reason})"
        if not self.leading:
            return "not the leader"
        if self._deadline_passed():
            self._lose(self._overdue())
            return f"not the leader any more ({self.lost_reason})"
        return None

    # -- handing over --------------------------------------------------------------------------------
    async def release(self) -> bool:
        """Hand the Lease over at once if this replica still holds it; True when it did.

        It reads the Lease before writing: a renew cut off on the way out (cancelled after its request
        left, its answer never read) may have moved the Lease on from the version this replica last saw,
        and a write on that version would be refused, leaving followers to wait out a full lease.
        """
        if not self.leading or self.observation is None:
            return False
        self.leading = False
        observer.current().leading(False)
        left = self._time_left()
        if left <= 0:
            return False
        try:
            async with asyncio.timeout(min(self.timings.call_timeout, left)):
                found = await self.store.get()
                if found is None or found[0].holder != self.identity:
                    return False
                record = released(found[0], self._wall())
                version = await self.store.update(record, found[1])
        except ATTEMPT_FAILURES as exc:
            log.warning("could not release the lease %s: %s", self.lease, _describe(exc))
            return False
        self.observation = Observation(record, version, self._clock())
        log.info("released the lease %s", self.lease)
        return True

    async def close(self) -> None:
        await self.store.close()


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


@contextlib.asynccontextmanager
async def leadership(elector: LeaderElector) -> AsyncIterator[None]:
    """Renew the Lease in the background while the block runs; on the way out stop renewing and release
    the Lease if it is still held. ``elector.lost`` is set if the Lease is lost meanwhile."""
    renewing = asyncio.create_task(elector.keep_leading(), name="lease-renewal")
    try:
        yield
    finally:
        renewing.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure already set ``lost``
            await renewing
        await elector.release()


async def connect(kubeconfig: str | None, *, name: str, namespace: str, timings: Timings) -> LeaderElector:
    """An elector for the Lease ``namespace/name`` with a client of its own from ``kubeconfig``."""
    store = await KubeLeaseStore.connect(kubeconfig, name, namespace, timeout=timings.call_timeout)
    return LeaderElector(store, identity=identity(), timings=timings, lease=f"{namespace}/{name}")
