"""The controller's client against the real API server: what a request costs besides the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp.client
import pytest

from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import NAMESPACES


async def test_a_request_looks_up_neither_a_netrc_nor_the_proxy_variables(
    kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp does both on every request of a session that trusts the environment, each in an executor
    thread: at thousands of pods a third of the controller's CPU, for answers that never change."""

    def per_request(*_: Any) -> None:
        raise AssertionError("the environment was read for a request")

    monkeypatch.setattr(aiohttp.client, "netrc_from_env", per_request)
    monkeypatch.setattr(aiohttp.client, "get_env_proxy_for_url", per_request)
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        for _ in range(3):
            found = await kube.get(NAMESPACES, namespace)
            assert found is not None and found["metadata"]["name"] == namespace
    finally:
        await kube.close()
