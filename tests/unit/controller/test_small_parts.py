"""Expectations, the token buckets, merge patches and quantities."""

from __future__ import annotations

import asyncio
import itertools
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from kubetrain import quantity
from kubetrain.controller.main import API_CONNECTIONS
from kubetrain.kube import lean
from kubetrain.kube.client import (
    KubeClient,
    RateLimits,
    TokenBucket,
    env_proxy,
    limited_kind,
    settle_environment,
)
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.patch import merge_patch
from kubetrain.kube.resources import PODS
from tests.support import FakeClock

k8s_client, _ = lean.load()


def test_expectations_are_met_when_every_create_and_delete_is_observed() -> None:
    expectations = Expectations()
    assert expectations.satisfied("ns/job")
    expectations.expect_creations("ns/job", 2)
    expectations.expect_deletion("ns/job", "uid-1")
    assert not expectations.satisfied("ns/job")
    expectations.creation_observed("ns/job")
    expectations.creation_observed("ns/job")
    assert not expectations.satisfied("ns/job")
    expectations.deletion_observed("ns/job", "uid-other")
    assert not expectations.satisfied("ns/job"), "only the expected uid counts"
    expectations.deletion_observed("ns/job", "uid-1")
    assert expectations.satisfied("ns/job")


def test_expectations_expire_so_a_lost_event_never_wedges_a_job() -> None:
    clock = FakeClock()
    expectations = Expectations(ttl=300, clock=clock)
    expectations.expect_creations("ns/job", 1)
    clock.now = 299
    assert not expectations.satisfied("ns/job")
    assert expectations.pending_for("ns/job") == pytest.approx(1)
    clock.now = 301
    assert expectations.satisfied("ns/job")


def test_token_bucket_allows_a_burst_then_spaces_requests_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now = 10
    assert bucket.reserve() == 0, "the bucket refills (up to the burst) while idle"


def test_each_api_kind_has_a_budget_of_its_own_as_in_a_controller_runtime_client() -> None:
    assert limited_kind("/api/v1/namespaces/team/pods") == "v1/pods"
    assert limited_kind("/api/v1/namespaces/team/pods/p-0/log?follow=true") == "v1/pods"
    assert (
        limited_kind("/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/j/status")
        == "kubeflow.org/v1/pytorchjobs"
    )
    assert limited_kind("/api/v1/nodes/n1") == "v1/nodes"
    assert limited_kind("/api/v1/namespaces/team") == limited_kind("/api/v1/namespaces") == "v1/namespaces"
    limits = RateLimits(qps=10, burst=2, clock=FakeClock())
    pods = limits.of("/api/v1/namespaces/a/pods")
    assert [pods.reserve() for _ in range(3)][-1] > 0, "the pods' bucket is spent"
    assert limits.of("/api/v1/namespaces/b/pods/x") is pods, "one bucket for the kind, in every namespace"
    assert limits.of("/api/v1/namespaces/a/services").reserve() == 0, "services do not wait for pods"
    assert limits.of("/apis/kubeflow.org/v1/namespaces/a/pytorchjobs/j/status").reserve() == 0


def test_events_get_a_budget_of_their_own_and_the_same_write_guard() -> None:
    kube = KubeClient(object(), qps=10, burst=3)  # type: ignore[arg-type]
    events = kube.with_own_budget()
    assert (events.limits.qps, events.limits.burst) == (10, 3)
    work = kube.limits.of("/api/v1/namespaces/a/events")
    assert [work.reserve() for _ in range(3)] == [0, 0, 0]
    assert work.reserve() > 0, "the work's bucket is spent"
    assert events.limits.of("/api/v1/namespaces/a/events").reserve() == 0, "an Event does not wait for it"
    assert events.write_guard is not None and events.write_guard() is None
    kube.write_guard = lambda: "fenced"
    assert events.write_guard() == "fenced", "a guard set later (leader election) fences Events too"


def test_a_disabled_token_bucket_never_waits() -> None:
    bucket = TokenBucket(qps=0, burst=0)
    assert all(bucket.reserve() == 0 for _ in range(1000))


def test_merge_patch_sends_changes_and_nulls_for_removed_keys() -> None:
    old = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1, 2], "gone": True}
    new = {"a": 1, "b": {"x": 1}, "c": [1, 2, 3], "added": "v"}
    assert merge_patch(old, new) == {"gone": None, "b": {"y": None}, "c": [1, 2, 3], "added": "v"}
    assert merge_patch(new, new) == {}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", Decimal(2)),
        ("500m", Decimal("0.5")),
        ("1Gi", Decimal(2**30)),
        ("1e3", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        (3, Decimal(3)),
        ("2k", Decimal(2000)),
    ],
)
def test_quantities_parse_exactly(text: str | int, value: Decimal) -> None:
    assert quantity.parse(text) == value


def test_quantities_sum_and_round_up() -> None:
    assert quantity.total(["500m", "500m", "1"]) == "2"
    assert quantity.total(["250m", "1"]) == "1250m"
    assert quantity.ceil("1500m") == 2
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity.parse("lots")


class Chunked:
    """A watch response whose body arrives in the given chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self.content = self
        self.chunks = chunks
        self.released = False

    async def iter_any(self) -> Any:
        for chunk in self.chunks:
            yield chunk

    def release(self) -> None:
        self.released = True


def test_a_watch_yields_every_event_however_its_lines_are_cut_into_chunks() -> None:
    lines = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}}).encode() for i in range(50)
    ]
    body = b"\n".join(lines) + b"\n\n"
    cuts = [0, 1, 7, 8, 300, len(body) - 3, len(body)]  # mid-line, on a newline, many lines in one chunk
    response = Chunked(*(body[a:b] for a, b in itertools.pairwise(cuts)))
    kube = KubeClient(object())  # type: ignore[arg-type]

    async def send(*_: Any, **__: Any) -> Chunked:
        return response

    kube._send = send  # type: ignore[method-assign,assignment]

    async def names() -> list[str]:
        return [e["object"]["metadata"]["name"] async for e in kube.watch(PODS, resource_version="1")]

    assert asyncio.run(names()) == [f"p{i}" for i in range(50)]
    assert response.released


@pytest.mark.parametrize(
    ("environment", "proxy", "headers"),
    [
        ({}, None, {}),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128", {}),
        ({"https_proxy": "http://proxy:3128", "NO_PROXY": "10.0.0.1"}, None, {}),
        ({"HTTP_PROXY": "http://proxy:3128"}, None, {}),  # the server speaks https
        (
            {"HTTPS_PROXY": "http://ops%40corp:s3cret@proxy:3128"},
            "http://proxy:3128",
            {"Proxy-Authorization": "Basic b3BzQGNvcnA6czNjcmV0"},  # ops@corp:s3cret
        ),
    ],
)
def test_the_api_servers_proxy_comes_from_the_environment_with_its_credentials_as_a_header(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], proxy: str | None, headers: dict[str, str]
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert env_proxy("https://10.0.0.1:6443") == (proxy, headers)


async def test_a_client_resolves_its_proxy_once_and_its_session_looks_up_nothing_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kubernetes_asyncio's session trusts the environment, so aiohttp reads ~/.netrc and the proxy
    variables on every request, each in an executor thread: a third of the controller's CPU unlimited."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    api = k8s_client.ApiClient(k8s_client.Configuration(host="https://10.0.0.1:6443"))
    replaced = settle_environment(api)
    rest = api.rest_client
    session, pool = rest.pool_manager, rest.pool_manager.connector
    assert (session.trust_env, rest.proxy) == (False, "http://proxy:3128")
    assert replaced is not None and replaced.connector is pool
    assert settle_environment(api) is None  # settled once
    await api.close()
    assert session.closed and not pool.closed  # the replaced session owns the pool
    await replaced.close()
    assert pool.closed


async def test_a_client_caps_its_pooled_connections_where_asked(tmp_path: Path) -> None:
    """Each pooled connection holds a TLS read buffer: the controller asks for fewer than the 100 of
    kubernetes_asyncio's default, a client that says nothing keeps that default."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    capped = await KubeClient.from_kubeconfig(str(kubeconfig), connections=API_CONNECTIONS)
    default = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        assert capped.api.rest_client.pool_manager.connector.limit == API_CONNECTIONS < 100
        assert default.api.rest_client.pool_manager.connector.limit == 100
        assert capped.api.configuration.host == "https://10.0.0.1:6443"
    finally:
        await capped.close()
        await default.close()
