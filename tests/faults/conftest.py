"""Fixtures of the fault suite: a fault proxy in front of the session's cluster, and a kubeconfig through it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.faultinjection.faultproxy import FaultProxy


@pytest.fixture
async def fault_proxy(kubeconfig: Path) -> AsyncIterator[FaultProxy]:
    """A running fault proxy for the dev cluster, with no rules yet (seed 1: a failing run repeats);
    stopped after the test, which ends whatever it still holds. It serves on the test's event loop,
    so a test that blocks the loop (a synchronous subprocess, ``time.sleep``) stalls its clients."""
    proxy = FaultProxy.for_kubeconfig(kubeconfig, seed=1)
    await proxy.start()
    yield proxy
    await proxy.stop()


@pytest.fixture
def proxied_kubeconfig(fault_proxy: FaultProxy, tmp_path: Path) -> Path:
    """The dev cluster's kubeconfig with the fault proxy as its server (same credentials)."""
    return fault_proxy.write_kubeconfig(tmp_path / "proxied.kubeconfig")
