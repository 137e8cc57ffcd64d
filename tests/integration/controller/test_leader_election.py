"""Leader election against the real API server: a replica that cannot start gives the Lease up and exits
non-zero; a replica stopped with SIGTERM hands the Lease over so the next one leads at once.

Each replica is ``kubetrain controller run --leader-elect`` as a process of its own, with its Lease in
the test's namespace and ``POD_NAME`` set so its identity in the Lease says which replica it is.
"""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from tests.conftest import Kubectl
from tests.support import HANG, Jobs, eventually, pytorchjob, start_controller_process


def start_replica(
    kubeconfig: Path, namespace: str, lease: str, name: str, log: Path, *args: str
) -> subprocess.Popen[bytes]:
    """One controller replica electing a leader through the Lease ``namespace/lease``."""
    election = ("--leader-elect", "--leader-election-namespace", namespace, "--leader-election-id", lease)
    return start_controller_process(kubeconfig, namespace, log, *election, *args, pod_name=name)


async def read_lease(
    coordination: client.CoordinationV1Api, namespace: str, lease: str
) -> client.V1LeaseSpec | None:
    try:
        found = await coordination.read_namespaced_lease(lease, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    spec: client.V1LeaseSpec = found.spec
    return spec


async def holder(coordination: client.CoordinationV1Api, namespace: str, lease: str) -> str:
    spec = await read_lease(coordination, namespace, lease)
    return (spec.holder_identity or "") if spec is not None else ""


def lease_only_kubeconfig(kubectl: Kubectl, kubeconfig: Path, namespace: str, dest: Path) -> Path:
    """A kubeconfig for a service account that may keep a Lease in ``namespace`` and nothing else: the
    controller can win the election but not read the CRDs it checks when it starts."""
    kubectl("create", "serviceaccount", "lease-only", "-n", namespace)
    kubectl(
        "create",
        "role",
        "lease-only",
        "-n",
        namespace,
        "--verb=get,create,update",
        "--resource=leases.coordination.k8s.io",
    )
    kubectl(
        "create",
        "rolebinding",
        "lease-only",
        "-n",
        namespace,
        "--role=lease-only",
        f"--serviceaccount={namespace}:lease-only",
    )
    token = kubectl("create", "token", "lease-only", "-n", namespace).stdout.strip()
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"] = [{"name": "lease-only", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "lease-only"
    dest.write_text(yaml.safe_dump(config))
    return dest


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    async def exited() -> tuple[int] | None:
        code = proc.poll()
        return None if code is None else (code,)  # truthy, even for exit code 0

    return (await eventually(exited, timeout=timeout, what="the replica to exit"))[0]


@pytest.mark.usefixtures("crds")
async def test_a_leader_that_cannot_start_exits_non_zero_and_gives_the_lease_up(
    kubectl: Kubectl, kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    restricted = lease_only_kubeconfig(kubectl, kubeconfig, namespace, tmp_path / "lease-only.kubeconfig")
    coordination = client.CoordinationV1Api(jobs.custom.api_client)
    log = tmp_path / "replica.log"
    replica = start_replica(restricted, namespace, "start-fails", "replica-a", log)
    try:
        code = await wait_exit(replica, timeout=60)
        exited_at = datetime.now()
    finally:
        if replica.poll() is None:
            replica.kill()
            replica.wait()
    output = log.read_text(errors="replace")
    assert code != 0, output[-3000:]
    assert "customresourcedefinitions" in output and "403" in output, output[-3000:]
    led_at = logged_at(output, "became leader")
    assert led_at is not None, f"replica-a never led:\n{output[-3000:]}"
    took = (exited_at - led_at).total_seconds()
    assert took < 5, f"exited {took:.1f}s after it became leader:\n{output[-3000:]}"
    spec = await read_lease(coordination, namespace, "start-fails")
    assert spec is not None, "the replica never took the Lease"
    assert not spec.holder_identity, f"{spec.holder_identity} still holds the Lease after exiting"
    assert spec.lease_duration_seconds == 1  # handed over, not left to expire


def logged_at(output: str, message: str) -> datetime | None:
    """When the controller's text log first says ``message`` (local time, as the log writes it)."""
    for line in output.splitlines():
        if message in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return None


@pytest.mark.usefixtures("crds")
async def test_a_controller_that_cannot_start_exits_non_zero_without_leader_election_too(
    kubectl: Kubectl, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    restricted = lease_only_kubeconfig(kubectl, kubeconfig, namespace, tmp_path / "lease-only.kubeconfig")
    proc = start_controller_process(restricted, namespace, tmp_path / "controller.log")
    try:
        code = await wait_exit(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, (tmp_path / "controller.log").read_text(errors="replace")[-3000:]


async def _held_by(
    coordination: client.CoordinationV1Api, namespace: str, lease: str, prefix: str
) -> str | None:
    current = await holder(coordination, namespace, lease)
    return current if current.startswith(prefix) else None


@pytest.mark.usefixtures("crds")
async def test_sigterm_hands_the_lease_over_and_the_next_replica_leads_at_once(
    kubeconfig: Path, namespace: str, jobs: Jobs, tmp_path: Path
) -> None:
    coordination = client.CoordinationV1Api(jobs.custom.api_client)
    timings = ("--leader-election-retry-period", "1")  # lease 15 s: only a handover can be this quick
    logs = {name: tmp_path / f"{name}.log" for name in ("replica-a", "replica-b")}
    first = start_replica(kubeconfig, namespace, "handover", "replica-a", logs["replica-a"], *timings)
    second: subprocess.Popen[bytes] | None = None
    try:
        await eventually(lambda: _started(logs["replica-a"]), timeout=60, what="replica-a to lead and start")
        second = start_replica(kubeconfig, namespace, "handover", "replica-b", logs["replica-b"], *timings)
        await eventually(
            lambda: _contains(logs["replica-b"], "is held by replica-a_"),
            timeout=60,
            what="replica-b to follow",
        )
        before = await read_lease(coordination, namespace, "handover")
        assert before is not None
        first.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        assert await wait_exit(first, timeout=30) == 0, logs["replica-a"].read_text()[-3000:]
        await eventually(
            lambda: _held_by(coordination, namespace, "handover", "replica-b_"),
            timeout=30,
            interval=0.05,
            what="replica-b to take the Lease",
        )
        takeover = time.monotonic() - stopped_at
        print(f"\nhandover on SIGTERM: replica-b led {takeover:.2f}s after replica-a was told to stop")
        assert takeover < 6, (
            f"replica-b took {takeover:.1f}s: the Lease was not handed over\n"
            + logs["replica-a"].read_text(errors="replace")[-3000:]
        )
        after = await read_lease(coordination, namespace, "handover")
        assert after is not None
        assert after.lease_transitions == (before.lease_transitions or 0) + 1
        # The new leader reconciles.
        await jobs.create(
            pytorchjob("after-handover", workers=1, master_annotations=HANG, worker_annotations=HANG)
        )
        await jobs.wait_pods("after-handover", 2, timeout=60)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    assert second is not None and second.returncode == 0, logs["replica-b"].read_text()[-3000:]


async def _started(log: Path) -> bool:
    return _contains_text(log, "controller started")


async def _contains(log: Path, text: str) -> bool:
    return _contains_text(log, text)


def _contains_text(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")
