"""The controller's and the job client's sessions against the real API server: what a request costs
besides the request."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp.client
import pytest

from kubetrain.client.aio import AsyncJobClient
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import NAMESPACES


@contextlib.contextmanager
def environment_read_per_request() -> Iterator[None]:
    """aiohttp reads ~/.netrc and the proxy variables on every request of a session that trusts the
    environment, each in an executor thread: at thousands of pods a third of the controller's CPU, for
    answers that never change. Here either lookup fails the request."""

    def per_request(*_: Any) -> None:
        raise AssertionError("the environment was read for a request")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aiohttp.client, "netrc_from_env", per_request)
        patch.setattr(aiohttp.client, "get_env_proxy_for_url", per_request)
        yield


async def test_a_controller_request_looks_up_neither_a_netrc_nor_the_proxy_variables(
    kubeconfig: Path, namespace: str
) -> None:
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        with environment_read_per_request():
            for _ in range(3):
                found = await kube.get(NAMESPACES, namespace)
                assert found is not None and found["metadata"]["name"] == namespace
    finally:
        await kube.close()


async def test_a_job_client_request_looks_up_neither_a_netrc_nor_the_proxy_variables(
    kubeconfig: Path, namespace: str
) -> None:
    async with await AsyncJobClient.connect(kubeconfig=str(kubeconfig)) as jobs:
        with environment_read_per_request():
            for _ in range(3):
                assert (await jobs.core.read_namespace(namespace)).metadata.name == namespace
