"""Leader failover: two replicas with ``--leader-elect``, the leader killed, frozen or cut off from its
Lease; the follower must take over within a lease duration and a retry period, and the two must never
write at the same time.

Each replica reaches the API server through the fault proxy under a client name of its own, so the
proxy's record says who wrote what and when, and a fault can hit one replica's lease calls alone. The
verdict comes from that record, not from the replicas' logs: no write of the old leader (lease calls
aside) may come after the new leader's first write.

The failover times printed here are what docs/reliability.md quotes.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import Exchange, FaultProxy
from tests.support import HANG, Jobs, eventually, pytorchjob, start_controller_process

LEASE = "failover"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5
TIMINGS = (
    f"--leader-election-lease-duration={LEASE_DURATION:g}",
    f"--leader-election-renew-deadline={RENEW_DEADLINE:g}",
    f"--leader-election-retry-period={RETRY_PERIOD:g}",
)
# What measuring adds to a takeover: lease polls every 50 ms, API calls on a busy machine.
MEASURING = 0.5


class Replica:
    """``kubetrain controller run --leader-elect`` through the proxy as client ``name``.

    Waits are polls that yield to the event loop: the proxy serves from this same loop, and a
    blocking wait would stall every replica's requests."""

    def __init__(self, name: str, proxy: FaultProxy, namespace: str, tmp_path: Path) -> None:
        self.name = name
        self.namespace = namespace
        self.kubeconfig = proxy.write_kubeconfig(tmp_path / f"{name}.kubeconfig", client=name)
        self.log = tmp_path / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.exited_at: float | None = None  # when a wait first saw it gone (time.monotonic())

    def start(self) -> None:
        election = ("--leader-elect", "--leader-election-namespace", self.namespace)
        self.proc = start_controller_process(
            self.kubeconfig,
            self.namespace,
            self.log,
            *election,
            "--leader-election-id",
            LEASE,
            *TIMINGS,
            pod_name=self.name,
        )

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def exit_code(self, timeout: float) -> int:
        assert self.proc is not None
        proc = self.proc

        async def exited() -> tuple[int] | None:
            code = proc.poll()
            if code is None:
                return None
            self.exited_at = self.exited_at or time.monotonic()
            return (code,)  # truthy, even for exit code 0

        return (await eventually(exited, timeout=timeout, interval=0.05, what=f"{self.name} to exit"))[0]

    async def says(self, text: str) -> bool:
        return text in self.text()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def end(self) -> None:
        """Whatever state it is in (a frozen one too): SIGTERM, then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            await self.exit_code(timeout=30)
        except AssertionError:
            self.proc.kill()
            await self.exit_code(timeout=10)


def not_lease(exchanges: list[Exchange]) -> list[Exchange]:
    return [e for e in exchanges if "/leases" not in e.path]


async def holder(coordination: client.CoordinationV1Api, namespace: str) -> str:
    try:
        lease = await coordination.read_namespaced_lease(LEASE, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "")


@pytest.mark.parametrize("fault", ["sigkill", "sigstop", "lease-calls-hang"])
@pytest.mark.usefixtures("crds")
async def test_the_follower_takes_over_in_time_and_the_two_never_write_at_once(
    fault: str, fault_proxy: FaultProxy, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    coordination = client.CoordinationV1Api(jobs.custom.api_client)
    old = Replica("replica-a", fault_proxy, namespace, tmp_path)
    new = Replica("replica-b", fault_proxy, namespace, tmp_path)

    async def held_by(replica: Replica) -> bool:
        return (await holder(coordination, namespace)).startswith(f"{replica.name}_")

    gave_up: asyncio.Task[int] | None = None
    try:
        old.start()
        await eventually(lambda: old.says("controller started"), timeout=60, what="replica-a to lead")
        assert await held_by(old)
        new.start()
        await eventually(lambda: new.says("is held by replica-a_"), timeout=60, what="replica-b to follow")
        await jobs.create(pytorchjob("before", workers=1, master_annotations=HANG, worker_annotations=HANG))
        await jobs.wait_pods("before", 2, timeout=60)  # the leader is writing

        faulted_at = time.monotonic()
        hang_rule = inject(fault, old, fault_proxy)
        gave_up = asyncio.create_task(old.exit_code(timeout=60)) if hang_rule is not None else None
        await eventually(lambda: held_by(new), timeout=30, interval=0.05, what="replica-b to take the Lease")
        failover = time.monotonic() - faulted_at
        print(
            f"\nleader failover after {fault}: {failover:.2f}s "
            f"(lease {LEASE_DURATION:g}s, renew deadline {RENEW_DEADLINE:g}s, retry {RETRY_PERIOD:g}s)"
        )
        assert failover <= LEASE_DURATION + RETRY_PERIOD + MEASURING, f"took {failover:.2f}s"
        assert failover >= LEASE_DURATION - RETRY_PERIOD - MEASURING, f"took over too early: {failover:.2f}s"
        if gave_up is not None:
            assert hang_rule is not None
            assert_gave_up_in_time(old, await gave_up, hang_rule, faulted_at)

        await jobs.create(pytorchjob("after", workers=1, master_annotations=HANG, worker_annotations=HANG))
        await jobs.wait_pods("after", 2, timeout=60)  # the new leader is writing
        resumed_at = None
        if fault == "sigstop":
            resumed_at = time.monotonic()
            old.signal(signal.SIGCONT)
            assert await old.exit_code(timeout=30) != 0, old.text()[-3000:]
        if fault != "sigkill":
            assert "lost the leader lease" in old.text(), old.text()[-3000:]

        assert_never_wrote_at_once(fault_proxy, old, new)
        if resumed_at is not None:
            late = [e for e in fault_proxy.writes(client=old.name) if e.started >= resumed_at]
            assert not late, f"replica-a wrote after it was resumed: {_show(late)}"
        if fault == "lease-calls-hang":
            fenced_from = faulted_at + RENEW_DEADLINE + 0.1
            late = [e for e in not_lease(fault_proxy.writes(client=old.name)) if e.started >= fenced_from]
            assert not late, f"replica-a wrote past its renew deadline: {_show(late)}"

        new.signal(signal.SIGTERM)
        assert await new.exit_code(timeout=30) == 0, new.text()[-3000:]
    finally:
        if gave_up is not None:
            gave_up.cancel()
        fault_proxy.release()
        await old.end()
        await new.end()


def inject(fault: str, leader: Replica, proxy: FaultProxy) -> faultproxy.Rule | None:
    """Kill or freeze the leader, or hang its lease calls (then: the rule that does)."""
    if fault == "sigkill":
        leader.signal(signal.SIGKILL)
    elif fault == "sigstop":
        leader.signal(signal.SIGSTOP)
    else:
        return proxy.add(faultproxy.Rule(faultproxy.hang(), path=rf"/leases/{LEASE}$", client=leader.name))
    return None


def assert_gave_up_in_time(leader: Replica, code: int, hang_rule: faultproxy.Rule, faulted_at: float) -> None:
    """The leader whose lease calls hang exited with an error, within its renew deadline."""
    assert leader.exited_at is not None
    print(f"replica-a, its lease calls hanging, exited after {leader.exited_at - faulted_at:.2f}s")
    assert code != 0, leader.text()[-3000:]
    assert hang_rule.fired > 0
    assert leader.exited_at - faulted_at <= RENEW_DEADLINE + 1, leader.text()[-3000:]


def assert_never_wrote_at_once(proxy: FaultProxy, old: Replica, new: Replica) -> None:
    """Both replicas wrote (lease calls aside), and none of the old leader's writes came after the new
    leader's first."""
    old_writes = not_lease(proxy.writes(client=old.name))
    new_writes = not_lease(proxy.writes(client=new.name))
    assert old_writes, "replica-a never wrote: the test proves nothing"
    assert new_writes, "replica-b never wrote after taking over"
    first_new = min(e.started for e in new_writes)
    overlapping = [e for e in old_writes if (e.finished or e.started) >= first_new]
    assert not overlapping, f"replica-a wrote after replica-b began: {_show(overlapping)}"


def _show(exchanges: list[Exchange]) -> str:
    return "; ".join(f"{e.method} {e.path} at {e.started:.2f}" for e in exchanges[:5])
