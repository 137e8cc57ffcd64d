"""Lease-based leader election, so only one replica of the controller acts at a time.

A thin wrapper over ``kubernetes_asyncio.leaderelection`` with
controller-runtime's timings (15 s lease, 10 s renew deadline, 2 s retry).
Losing the lease ends the process with a non-zero code rather than trying to
quiesce in place: Kubernetes restarts it as a follower, which is simpler to
reason about than a half-stopped leader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable

from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from kubetrain.controller import metrics
from kubetrain.controller.kube.client import KubeClient

log = logging.getLogger(__name__)


def identity() -> str:
    """This replica's identity in the Lease: the pod name (hostname) plus a random suffix."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


async def run_as_leader(
    kube: KubeClient,
    *,
    name: str,
    namespace: str,
    lead: Callable[[], Awaitable[None]],
    lease_duration: float = 15,
    renew_deadline: float = 10,
    retry_period: float = 2,
) -> None:
    """Wait to become leader, then run ``lead()``; raise SystemExit(1) if the lease is lost."""
    lost = asyncio.Event()

    async def started() -> None:
        metrics.leader.set(1)
        log.info("became leader (lease %s/%s)", namespace, name)
        await lead()

    async def stopped() -> None:
        metrics.leader.set(0)
        lost.set()

    lock = LeaseLock(name, namespace, identity(), kube.api)
    config = electionconfig.Config(lock, lease_duration, renew_deadline, retry_period, started, stopped)
    await leaderelection.LeaderElection(config).run()
    if lost.is_set():
        log.error("lost the leader lease %s/%s; exiting so a new leader can take over", namespace, name)
        raise SystemExit(1)
