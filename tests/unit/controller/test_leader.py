"""Leader election: the pure takeover decision, the renew deadline, the write fence and the supervision.

The elector runs here against an in-memory Lease with optimistic concurrency and a fake monotonic
clock whose sleeps advance time, so "no takeover before 15 s" is checked to the second without
waiting. The same elector against the real API server, killed, frozen and cut off, is in
tests/integration/controller/test_leader_election.py and tests/faults/test_leader_failover.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from kubetrain.controller import metrics
from kubetrain.controller.main import StartError, supervise
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient, WriteFencedError
from kubetrain.kube.leader import (
    Action,
    LeaderElector,
    LeadershipLostError,
    LeaseRecord,
    Observation,
    Timings,
    decide,
    leadership,
    observe,
    released,
)
from tests.support import FakeClock

EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
WALL = EPOCH + timedelta(hours=1)
STAMP = "2030-01-01T01:00:00.000000Z"


# -- the decision ----------------------------------------------------------------------------------
def held_by(
    holder: str, *, transitions: int = 3, renewed: str = "2030-01-01T00:59:59.000000Z"
) -> LeaseRecord:
    return LeaseRecord(holder, 15, "2030-01-01T00:00:00.000000Z", renewed, transitions)


def test_without_a_lease_a_replica_creates_one_holding_it() -> None:
    decision = decide(None, identity="me", now=5.0, wall=WALL, lease_seconds=15)
    assert decision.action is Action.ACQUIRE
    assert decision.record == LeaseRecord("me", 15, STAMP, STAMP, 0)


def test_a_follower_takes_over_only_once_the_lease_expired_by_its_own_observation() -> None:
    seen = Observation(held_by("other"), "7", observed_at=100.0)
    waiting = decide(seen, identity="me", now=114.5, wall=WALL, lease_seconds=15)
    assert waiting.action is Action.WAIT
    assert waiting.expires_in == pytest.approx(0.5)
    taking = decide(seen, identity="me", now=115.0, wall=WALL, lease_seconds=15)
    assert taking.action is Action.ACQUIRE
    assert taking.record == LeaseRecord("me", 15, STAMP, STAMP, 4)  # a takeover counts a transition


@pytest.mark.parametrize("renewed", ["2000-01-01T00:00:00.000000Z", "2099-01-01T00:00:00.000000Z"])
def test_the_holders_renew_time_does_not_decide_expiry(renewed: str) -> None:
    """Another node's clock may be hours off: an ancient renewTime is no reason to take over at once,
    and one in the future no reason to wait longer."""
    seen = Observation(held_by("other", renewed=renewed), "7", observed_at=100.0)
    assert decide(seen, identity="me", now=100.1, wall=WALL, lease_seconds=15).action is Action.WAIT
    assert decide(seen, identity="me", now=115.0, wall=WALL, lease_seconds=15).action is Action.ACQUIRE


def test_expiry_counts_from_when_the_current_record_was_first_seen() -> None:
    first = observe(None, held_by("other"), "7", now=100.0)
    again = observe(first, held_by("other"), "8", now=110.0)  # same record, read again
    assert again.observed_at == 100.0 and again.resource_version == "8"
    renewed = observe(again, held_by("other", renewed="2030-01-01T00:59:59.500000Z"), "9", now=112.0)
    assert renewed.observed_at == 112.0  # the holder renewed: a fresh 15 s from now
    assert decide(renewed, identity="me", now=126.0, wall=WALL, lease_seconds=15).action is Action.WAIT


def test_the_holder_renews_keeping_its_acquire_time_and_transitions() -> None:
    mine = Observation(held_by("me", transitions=4), "7", observed_at=100.0)
    decision = decide(mine, identity="me", now=500.0, wall=WALL, lease_seconds=15)
    assert decision.action is Action.RENEW
    assert decision.record == LeaseRecord("me", 15, "2030-01-01T00:00:00.000000Z", STAMP, 4)


def test_a_released_lease_is_taken_at_once() -> None:
    handed_over = released(held_by("other", transitions=4), WALL)
    assert handed_over == LeaseRecord("", 1, STAMP, STAMP, 4)
    seen = Observation(handed_over, "8", observed_at=100.0)
    decision = decide(seen, identity="me", now=100.0, wall=WALL, lease_seconds=15)
    assert decision.action is Action.ACQUIRE
    assert decision.record is not None and decision.record.transitions == 5


def test_the_lease_record_round_trips_through_a_lease_spec() -> None:
    record = held_by("me")
    assert LeaseRecord.from_spec(record.to_spec()) == record
    assert LeaseRecord.from_spec({}) == LeaseRecord()


@pytest.mark.parametrize(("lease", "deadline", "retry"), [(15, 15, 2), (15, 10, 10), (15, 20, 2), (3, 2, 0)])
def test_timings_that_would_allow_two_leaders_are_refused(
    lease: float, deadline: float, retry: float
) -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        Timings(lease, deadline, retry)


def test_the_defaults_are_controller_runtimes_and_a_lease_call_fits_twice_in_the_deadline() -> None:
    timings = Timings()
    assert (timings.lease_duration, timings.renew_deadline, timings.retry_period) == (15, 10, 2)
    assert timings.call_timeout == 5
    assert Timings(2.5, 2, 0.5).lease_seconds == 3


# -- the elector over an in-memory Lease -------------------------------------------------------------
class MemoryLease:
    """One Lease with the API server's optimistic concurrency; can fail, hang, or be raced."""

    def __init__(self, record: LeaseRecord | None = None) -> None:
        self.record = record
        self.version = 1
        self.writes: list[LeaseRecord] = []
        self.failing: Callable[[], BaseException | None] = lambda: None
        self.hang = False
        self.before_update: Callable[[], None] | None = None

    async def _check(self) -> None:
        if self.hang:
            await asyncio.Event().wait()
        failure = self.failing()
        if failure is not None:
            raise failure

    def force(self, record: LeaseRecord) -> None:
        """Another replica writes."""
        self.record = record
        self.version += 1

    async def get(self) -> tuple[LeaseRecord, str] | None:
        await self._check()
        return None if self.record is None else (self.record, str(self.version))

    async def create(self, record: LeaseRecord) -> str:
        await self._check()
        if self.record is not None:
            raise errors.APIConflictError(409, {"reason": "AlreadyExists"}, method="POST", path="leases")
        return self._write(record)

    async def update(self, record: LeaseRecord, resource_version: str) -> str:
        await self._check()
        if self.before_update is not None:
            self.before_update()
        if resource_version != str(self.version):
            raise errors.APIConflictError(409, {"reason": "Conflict"}, method="PUT", path="leases")
        return self._write(record)

    def _write(self, record: LeaseRecord) -> str:
        self.writes.append(record)
        self.force(record)
        return str(self.version)

    async def close(self) -> None:
        pass


def elector(
    lease: MemoryLease, clock: FakeClock, name: str = "me", timings: Timings | None = None
) -> LeaderElector:
    return LeaderElector(
        lease,
        identity=name,
        timings=timings or Timings(),
        clock=clock,
        wall=lambda: EPOCH + timedelta(seconds=clock.now),
        sleep=clock.sleep,
    )


async def test_a_follower_waits_out_a_silent_holders_lease_then_takes_over() -> None:
    metrics.install()
    clock = FakeClock(1000.0)
    lease = MemoryLease(held_by("crashed", transitions=3, renewed="2000-01-01T00:00:00.000000Z"))
    follower = elector(lease, clock)
    await follower.acquire()
    assert clock.now == 1015.0  # first seen at 1000, not a moment before 1000 + 15
    assert follower.leading and follower.renewed_at == 1015.0
    assert lease.record is not None
    assert (lease.record.holder, lease.record.transitions) == ("me", 4)
    assert metrics.REGISTRY.get_sample_value("kubetrain_leader") == 1


async def test_of_two_replicas_racing_for_an_expired_lease_one_wins_the_other_waits_a_full_lease() -> None:
    clock = FakeClock(1000.0)
    lease = MemoryLease(held_by("crashed", transitions=3))

    def rival_takes_it_first() -> None:
        lease.before_update = None
        lease.force(LeaseRecord("rival", 15, "t", "t", 4))

    lease.before_update = rival_takes_it_first
    loser = elector(lease, clock)
    await loser.acquire()
    # 1015: its takeover hit a 409; 1017: it saw the rival's record and gave it a full 15 s.
    assert clock.now == 1032.0
    assert lease.record is not None and (lease.record.holder, lease.record.transitions) == ("me", 5)
    assert [w.holder for w in lease.writes] == ["me"]


async def test_a_replica_that_may_not_take_the_lease_says_why_once_per_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Lease the controller may not read (RBAC, a missing namespace) must not leave a silent process
    that never starts: each new reason is a warning, a repeated one is not."""
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    forbidden = errors.APIError(403, {"message": "leases is forbidden"}, method="GET", path="leases")
    lease.failing = lambda: forbidden if clock.now < 1006 else None
    with caplog.at_level("WARNING", logger="kubetrain.kube.leader"):
        await elector(lease, clock).acquire()
    assert clock.now == 1006.0  # tried at 1000, 1002 and 1004, then took it
    assert [r.getMessage() for r in caplog.records] == [
        "lease : cannot acquire it yet: GET leases: 403 leases is forbidden"
    ]


async def lead(lease: MemoryLease, clock: FakeClock, timings: Timings | None = None) -> LeaderElector:
    leader = elector(lease, clock, timings=timings)
    await leader.acquire()
    assert leader.leading
    return leader


@pytest.mark.parametrize(
    "failure",
    [
        errors.APIServerError(503, {"message": "etcd leader changed"}, method="GET", path="leases"),
        errors.APIServerError(0, "Connection reset by peer", method="GET", path="leases"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
        errors.APITooManyRequestsError(429, {}, method="GET", path="leases"),
    ],
    ids=["5xx", "connection-error", "disconnected", "timeout", "429"],
)
async def test_the_leader_gives_up_exactly_a_renew_deadline_after_its_last_successful_renew(
    failure: BaseException,
) -> None:
    metrics.install()
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    leader = await lead(lease, clock)
    lease.failing = lambda: failure if clock.now >= 1003 else None  # the renew at 1002 still works
    with pytest.raises(LeadershipLostError, match="no successful renew in the last 10s"):
        await leader.keep_leading()
    assert clock.now == 1012.0  # 1002 + 10: failed tries at 1004, 1006, 1008, 1010 did not crash it
    assert leader.lost.is_set() and not leader.leading
    assert metrics.REGISTRY.get_sample_value("kubetrain_leader") == 0
    assert [w.renew_time for w in lease.writes] == [
        "2030-01-01T00:16:40.000000Z",
        "2030-01-01T00:16:42.000000Z",
    ]


async def test_the_leader_gives_up_at_once_when_the_lease_names_another_holder() -> None:
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    leader = await lead(lease, clock)
    lease.force(LeaseRecord("usurper", 15, "t", "t", 1))
    with pytest.raises(LeadershipLostError, match="held by usurper"):
        await leader.keep_leading()
    assert clock.now == 1002.0
    assert [w.holder for w in lease.writes] == ["me"]  # it did not write over the new holder


async def test_a_renew_that_hangs_is_cut_off_and_the_leader_gives_up_in_time() -> None:
    """Real time, small timings: the lease calls never answer (a half-open connection)."""
    timings = Timings(lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)
    lease = MemoryLease()
    leader = LeaderElector(lease, identity="me", timings=timings)
    await leader.acquire()
    assert leader.renewed_at is not None
    lease.hang = True
    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(leader.keep_leading(), 5)
    late = time.monotonic() - (leader.renewed_at + timings.renew_deadline)
    assert 0 <= late < 0.15, f"gave up {late:.3f}s after the renew deadline"


async def test_the_fence_refuses_writes_once_the_deadline_passed_even_before_the_renew_loop_runs() -> None:
    """A leader frozen for longer than the renew deadline resumes: its first write is refused."""
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    leader = elector(lease, clock)
    assert leader.fence() == "not the leader"
    await leader.acquire()
    clock.now = 1009.9
    assert leader.fence() is None
    clock.now = 1010.0  # no renew since 1000: the process was frozen
    reason = leader.fence()
    assert reason is not None and "no successful renew in the last 10s" in reason
    assert leader.lost.is_set() and not leader.leading
    assert leader.fence() is not None
    assert not await leader.release()  # and it does not touch the Lease any more
    assert [w.holder for w in lease.writes] == ["me"]


async def test_a_released_lease_is_taken_by_the_next_replica_without_waiting() -> None:
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    first = await lead(lease, clock)
    successor = elector(lease, clock, name="successor")
    assert (await successor._attempt(5)) is not None and not successor.leading  # it saw "me" holding
    assert await first.release()
    assert lease.record == LeaseRecord("", 1, lease.record.acquire_time, lease.record.renew_time, 0)
    assert first.fence() == "not the leader"
    await successor.acquire()
    assert clock.now == 1000.0
    assert lease.record is not None and (lease.record.holder, lease.record.transitions) == ("successor", 1)


async def test_a_renew_whose_answer_was_lost_on_the_way_out_does_not_stop_the_release() -> None:
    """Stopping cancels the renew loop, possibly after its PUT reached the API server: the Lease then
    has a newer version than the leader saw, and the handover must still happen."""
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    leader = await lead(lease, clock)
    assert lease.record is not None
    lease.force(replace(lease.record, renew_time="2030-01-01T00:16:41.000000Z"))  # its renew, unread
    assert await leader.release()
    assert lease.record is not None and (lease.record.holder, lease.record.duration_seconds) == ("", 1)


async def test_a_leader_does_not_release_a_lease_another_replica_holds_now() -> None:
    clock = FakeClock(1000.0)
    lease = MemoryLease()
    leader = await lead(lease, clock)
    lease.force(LeaseRecord("usurper", 15, "t", "t", 1))
    assert not await leader.release()
    assert lease.record is not None and lease.record.holder == "usurper"
    assert [w.holder for w in lease.writes] == ["me"]


async def test_leadership_keeps_renewing_while_the_block_runs_and_releases_on_the_way_out() -> None:
    timings = Timings(lease_duration=0.6, renew_deadline=0.4, retry_period=0.02)
    lease = MemoryLease()
    leader = LeaderElector(lease, identity="me", timings=timings)
    await leader.acquire()
    async with leadership(leader):
        await asyncio.sleep(0.5)  # longer than the renew deadline: only renewing keeps it
        assert leader.fence() is None
    assert len(lease.writes) > 3
    assert lease.record is not None and lease.record.holder == ""


# -- the write guard in the client ---------------------------------------------------------------------
class Answer:
    def __init__(self, status: int, body: bytes = b"{}") -> None:
        self.status = status
        self.headers: dict[str, str] = {}
        self._body = body

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class RecordingApi:
    """Stands in for kubernetes_asyncio's ApiClient: records what would have been sent."""

    def __init__(self, *answers: int | BaseException) -> None:
        self.sent: list[tuple[str, str]] = []
        self.answers = list(answers)

    async def call_api(self, path: str, method: str, **_: Any) -> Answer:
        self.sent.append((method, path))
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, BaseException):
            raise answer
        return Answer(answer)


async def test_the_write_guard_stops_every_mutating_request_before_it_is_sent() -> None:
    api = RecordingApi()
    kube = KubeClient(api)  # type: ignore[arg-type]
    refusal: list[str | None] = ["lease lost"]
    kube.write_guard = lambda: refusal[0]
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(WriteFencedError, match="lease lost"):
            await kube.request(method, "/api/v1/namespaces/ns/pods")
    assert await kube.request("GET", "/api/v1/namespaces/ns/pods") == {}
    assert api.sent == [("GET", "/api/v1/namespaces/ns/pods")]
    refusal[0] = None
    await kube.request("POST", "/api/v1/namespaces/ns/pods")
    assert api.sent[-1] == ("POST", "/api/v1/namespaces/ns/pods")


@pytest.mark.parametrize("failure", [503, aiohttp.ClientConnectionError("refused")])
async def test_a_single_attempt_call_is_not_retried(failure: int | BaseException) -> None:
    api = RecordingApi(failure, failure)
    kube = KubeClient(api)  # type: ignore[arg-type]
    with pytest.raises(errors.APIServerError):
        await kube.request("GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", retries=0)
    assert len(api.sent) == 1


# -- supervision of the leading work ---------------------------------------------------------------------
class FakeManager:
    def __init__(self, start: Callable[[], Any] | None = None) -> None:
        self._start = start
        self.stopped = False

    async def start(self) -> None:
        await asyncio.sleep(0)
        if self._start is not None:
            self._start()

    async def stop(self) -> None:
        self.stopped = True


def fail_start() -> None:
    raise errors.APIError(403, {"message": "forbidden"}, method="GET", path="crds")


def give_up() -> None:
    raise SystemExit("--gang-scheduler-name=volcano needs the CRD")


@pytest.mark.parametrize(("start", "error"), [(fail_start, errors.APIError), (give_up, StartError)])
async def test_a_start_that_fails_ends_the_run_with_its_error(
    start: Callable[[], None], error: type[Exception]
) -> None:
    manager = FakeManager(start)
    with pytest.raises(error):
        await asyncio.wait_for(supervise(manager, asyncio.Event(), None), 5)  # type: ignore[arg-type]
    assert manager.stopped


async def test_a_lease_lost_while_leading_ends_the_run() -> None:
    clock = FakeClock(1000.0)
    leader = await lead(MemoryLease(), clock)
    manager = FakeManager()
    running = asyncio.create_task(supervise(manager, asyncio.Event(), leader))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    assert not running.done()
    clock.now = 1011.0
    assert leader.fence() is not None  # a write after a freeze trips the fence
    with pytest.raises(LeadershipLostError, match="no successful renew"):
        await asyncio.wait_for(running, 5)
    assert manager.stopped


async def test_stop_ends_the_run_cleanly() -> None:
    manager = FakeManager()
    stop = asyncio.Event()
    running = asyncio.create_task(supervise(manager, stop, None))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert manager.stopped


# -- the command line ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags",
    [
        ["--leader-election-renew-deadline", "20"],  # longer than the lease: two leaders at once
        ["--leader-election-retry-period", "10"],  # no second try before the deadline
    ],
)
def test_the_command_refuses_timings_that_allow_two_leaders(flags: list[str]) -> None:
    from typer.testing import CliRunner

    from kubetrain.cli import app

    result = CliRunner().invoke(app, ["controller", "run", "--leader-elect", *flags])
    assert result.exit_code == 2, result.output
    words = " ".join(result.output.replace("\u2502", " ").split())  # unwrap the error box
    assert "retry period < renew deadline < lease duration" in words
