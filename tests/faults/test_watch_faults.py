"""The controller's caches under watch faults: a watch that hangs, one cut mid-stream, one refused.

Every one must end with the cache holding what the API server holds, and without re-listing when
watching again from the last resourceVersion is enough (a re-list of every pod is the expensive call).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import CONFIGMAPS
from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import FaultProxy, Rule
from tests.support import eventually


@pytest.fixture
async def proxied_kube(proxied_kubeconfig: Path) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.from_kubeconfig(str(proxied_kubeconfig))
    yield kube
    await kube.close()


async def _cache_sees(informer: Informer, core: client.CoreV1Api, namespace: str, name: str) -> None:
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})

    async def seen() -> bool:
        return informer.get(f"{namespace}/{name}") is not None

    await eventually(seen, timeout=20, what=f"the cache to see ConfigMap {name}")


def _lists(proxy: FaultProxy) -> int:
    return sum(
        1
        for e in proxy.exchanges
        if e.method == "GET" and e.path.endswith("/configmaps") and "watch" not in e.query
    )


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(faultproxy.hang(), id="the watch request hangs"),
        pytest.param(faultproxy.cut(after=0.5), id="the watch is cut mid-stream"),
        pytest.param(faultproxy.respond(503), id="the watch is refused"),
        pytest.param(faultproxy.drop(), id="the watch connection drops"),
    ],
)
async def test_a_faulty_watch_is_watched_again_and_the_cache_catches_up(
    fault: faultproxy.Action,
    fault_proxy: FaultProxy,
    proxied_kube: KubeClient,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    rule = fault_proxy.add(Rule(fault, method="GET", path=r"/configmaps$", watch=True, times=1))
    informer = Informer(proxied_kube, CONFIGMAPS, namespace=namespace, stall_timeout=2.0)
    informer.start()
    try:
        await asyncio.wait_for(informer.wait_synced(), 20)
        await _cache_sees(informer, core, namespace, "after-the-fault")
        assert rule.fired == 1
        if isinstance(fault, faultproxy.Hang | faultproxy.Cut):
            assert _lists(fault_proxy) == 1, "watching again from the last version needs no re-list"
    finally:
        await informer.stop()
