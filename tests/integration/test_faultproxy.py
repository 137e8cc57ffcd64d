"""The fault proxy in front of the real API server: requests and watches pass through as they would
without it, and every fault is seen by a Kubernetes client the way the real thing would be seen."""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import json
import re
import signal
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, config, watch

from kubetrain.devcluster.cluster import DevCluster
from tests.docs_commands import REPO, documented, python_blocks
from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import Exchange, FaultProxy, Rule
from tests.faultinjection.faultrules import Action
from tests.support import Jobs, eventually, pytorchjob

CONFIGMAPS = r"/configmaps$"


def configmap(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"k": "v"}}


@pytest.fixture
async def proxy(kubeconfig: Path) -> AsyncIterator[FaultProxy]:
    async with FaultProxy.for_kubeconfig(kubeconfig, seed=1) as proxy:
        yield proxy


@pytest.fixture
async def through(
    proxy: FaultProxy, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[client.ApiClient]]]:
    """Opens a Kubernetes client whose requests go through the proxy (as a named client, if given)."""
    async with contextlib.AsyncExitStack() as opened:

        async def open_client(name: str | None = None) -> client.ApiClient:
            path = proxy.write_kubeconfig(tmp_path / f"proxied-{name}.kubeconfig", client=name)
            api = await config.new_client_from_config(config_file=str(path))
            return await opened.enter_async_context(api)

        yield open_client


@pytest.fixture
async def proxied_core(through: Callable[..., Awaitable[client.ApiClient]]) -> client.CoreV1Api:
    return client.CoreV1Api(await through())


async def exists(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        await core.read_namespaced_config_map(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def in_flight(proxy: FaultProxy, fault: str) -> Callable[[], Awaitable[Exchange | None]]:
    """A probe: the request the proxy is holding with this fault, once it holds one."""

    async def probe() -> Exchange | None:
        return next((e for e in proxy.exchanges if e.fault == fault and e.finished is None), None)

    return probe


async def create_unanswered(
    proxy: FaultProxy, fault: Action, proxied_core: client.CoreV1Api, namespace: str, name: str
) -> None:
    """Create a ConfigMap through the proxy with ``fault`` on that POST (once): the client sees the
    connection close without an answer."""
    proxy.add(Rule(fault, method="POST", path=CONFIGMAPS, times=1))
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await proxied_core.create_namespaced_config_map(namespace, configmap(name))


async def watch_started(proxy: FaultProxy) -> Exchange | None:
    return next((e for e in proxy.exchanges if "watch" in e.query and e.status == 200), None)


async def test_a_client_lists_and_watches_through_the_proxy(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, core: client.CoreV1Api, namespace: str
) -> None:
    listed = await proxied_core.list_namespaced_config_map(namespace)
    events: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def follow() -> None:
        async with watch.Watch() as stream:
            async for event in stream.stream(
                proxied_core.list_namespaced_config_map,
                namespace,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=120,
            ):
                await events.put((event["type"], event["object"].metadata.name))

    follower = asyncio.create_task(follow())
    try:
        await eventually(lambda: watch_started(proxy), timeout=10, what="the watch to be open")
        # Each event arrives while the watch is still open: the proxy streams, it does not buffer.
        for name in ("first", "second"):
            await core.create_namespaced_config_map(namespace, configmap(name))
            assert await asyncio.wait_for(events.get(), 10) == ("ADDED", name)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    assert [(e.method, e.path, e.status) for e in proxy.exchanges[:2]] == [
        ("GET", f"/api/v1/namespaces/{namespace}/configmaps", 200),
        ("GET", f"/api/v1/namespaces/{namespace}/configmaps", 200),
    ]
    assert proxy.exchanges[1].query["watch"].lower() == "true"


async def test_a_request_without_a_credential_of_its_own_is_refused_by_the_proxy(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """The proxy adds no credential (docs/security.md): whoever reaches its port without one of their
    own gets a 401 from the proxy, and the API server never sees the request."""
    ca = tmp_path / "proxy-ca.crt"
    ca.write_bytes(proxy.ca_pem)
    tls = ssl.create_default_context(cafile=str(ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as anonymous:
        async with anonymous.get(f"{proxy.url}/api/v1/namespaces/{namespace}/configmaps") as answer:
            assert answer.status == 401
            assert "credential of their own" in (await answer.json())["message"]
        async with anonymous.get(f"{proxy.url}/version", headers={"Authorization": "Bearer wrong"}) as answer:
            assert answer.status == 401  # forwarded, and refused by the API server itself
    assert [e.status for e in proxy.exchanges] == [401]  # the forwarded one: the proxy's own is not recorded
    await proxied_core.list_namespaced_config_map(namespace)  # the kubeconfig's own token passes
    assert [e.status for e in proxy.exchanges] == [401, 200]


async def test_a_client_certificate_user_is_forwarded_only_for_a_client_that_presents_that_certificate(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    """A kubeconfig user with a client certificate (kind's): the proxy presents it upstream only for a
    client that presented it to the proxy, proving it holds the key."""
    keys = dev_cluster.pki
    cert, key = keys.kubelet_client_cert, keys.kubelet_client_key  # a client certificate of the cluster CA
    kubeconfig = yaml.safe_load(dev_cluster.kubeconfig.read_text())
    data = {"client-certificate-data": cert.read_bytes(), "client-key-data": key.read_bytes()}
    kubeconfig["users"][0]["user"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    source = tmp_path / "certificate.kubeconfig"
    source.write_text(yaml.safe_dump(kubeconfig))
    async with FaultProxy.for_kubeconfig(source) as proxy:
        ca = tmp_path / "proxy-ca.crt"
        ca.write_bytes(proxy.ca_pem)
        anonymous = ssl.create_default_context(cafile=str(ca))
        holder = ssl.create_default_context(cafile=str(ca))
        holder.load_cert_chain(cert, key)
        answers = []
        for tls in (anonymous, holder):
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as session,
                session.get(f"{proxy.url}/api") as answer,
            ):
                answers.append(answer.status)
        assert answers == [401, 200]
        api = await config.new_client_from_config(config_file=str(proxy.write_kubeconfig(tmp_path / "p")))
        async with api:
            assert (await client.CoreApi(api).get_api_versions()).versions == ["v1"]
        assert [e.status for e in proxy.exchanges] == [200, 200]


@pytest.mark.parametrize(
    ("status", "retry_after", "reason"),
    [(409, None, "Conflict"), (503, None, "ServiceUnavailable"), (429, 3, "TooManyRequests")],
)
async def test_respond_answers_for_the_api_server_which_never_sees_the_request(
    proxy: FaultProxy,
    proxied_core: client.CoreV1Api,
    core: client.CoreV1Api,
    namespace: str,
    status: int,
    retry_after: int | None,
    reason: str,
) -> None:
    rule = proxy.add(
        Rule(
            faultproxy.respond(status, message="injected", retry_after=retry_after),
            method="POST",
            path=CONFIGMAPS,
            times=1,
        )
    )
    with pytest.raises(client.ApiException) as refused:
        await proxied_core.create_namespaced_config_map(namespace, configmap("a"))
    assert refused.value.status == status
    assert refused.value.headers.get("Retry-After") == (str(retry_after) if retry_after else None)
    body = json.loads(refused.value.body)
    assert (body["kind"], body["reason"], body["message"], body["code"]) == (
        "Status",
        reason,
        "injected",
        status,
    )
    assert not await exists(core, namespace, "a")
    await proxied_core.create_namespaced_config_map(namespace, configmap("a"))  # fired once only
    assert rule.fired == 1
    assert [(e.status, e.fault) for e in proxy.writes()] == [(status, f"respond {status}"), (201, None)]


async def test_drop_closes_the_connection_without_an_answer(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, core: client.CoreV1Api, namespace: str
) -> None:
    await create_unanswered(proxy, faultproxy.drop(), proxied_core, namespace, "a")
    assert not await exists(core, namespace, "a")
    assert [(e.method, e.status, e.fault) for e in proxy.exchanges] == [("POST", None, "drop")]
    # As the docs say: aiohttp sends a dropped GET once more, so one drop goes unnoticed.
    proxy.add(Rule(faultproxy.drop(), method="GET", path=CONFIGMAPS, times=1))
    await proxied_core.list_namespaced_config_map(namespace)
    assert [(e.status, e.fault) for e in proxy.exchanges[1:]] == [(None, "drop"), (200, None)]


async def test_delay_answers_late(proxy: FaultProxy, proxied_core: client.CoreV1Api, namespace: str) -> None:
    proxy.add(Rule(faultproxy.delay(1.0), method="GET", path=CONFIGMAPS, times=1))
    started = time.monotonic()
    await proxied_core.list_namespaced_config_map(namespace)
    assert time.monotonic() - started >= 1.0
    (delayed,) = proxy.exchanges
    assert delayed.fault == "delay 1s" and delayed.status == 200
    assert delayed.finished is not None and delayed.finished - delayed.started >= 1.0


async def test_hang_holds_a_request_until_the_client_gives_up_or_it_is_released(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, namespace: str
) -> None:
    proxy.add(Rule(faultproxy.hang(), method="GET", path=CONFIGMAPS, times=2))
    abandoned = asyncio.create_task(proxied_core.list_namespaced_config_map(namespace, _request_timeout=2))
    held = await eventually(in_flight(proxy, "hang"), timeout=10, what="the first request to be held")
    await proxied_core.list_namespace()  # a held request holds up nothing else
    with pytest.raises(TimeoutError):
        await abandoned
    await eventually(lambda: _finished(held), timeout=10, what="the proxy to notice the client left")
    assert held.status is None

    released = asyncio.create_task(proxied_core.list_namespaced_config_map(namespace))
    await eventually(in_flight(proxy, "hang"), timeout=10, what="the second request to be held")
    assert not released.done()
    proxy.release()
    listed = await asyncio.wait_for(released, 10)
    assert isinstance(listed, client.V1ConfigMapList)
    assert proxy.exchanges[-1].status == 200


async def _finished(exchange: Exchange) -> bool:
    return exchange.finished is not None


async def test_cut_breaks_off_a_watch(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, namespace: str
) -> None:
    proxy.add(Rule(faultproxy.cut(after=1.0), watch=True, times=1))
    started = time.monotonic()
    with pytest.raises(aiohttp.ClientPayloadError):
        async with watch.Watch() as stream:
            async for _ in stream.stream(
                proxied_core.list_namespaced_config_map, namespace, timeout_seconds=60
            ):
                pass
    assert 1.0 <= time.monotonic() - started < 30
    (cut,) = proxy.exchanges
    assert (cut.status, cut.fault) == (200, "cut after 1s")


async def test_lose_response_carries_out_the_write_but_the_client_never_learns(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, core: client.CoreV1Api, namespace: str
) -> None:
    await create_unanswered(proxy, faultproxy.lose_response(), proxied_core, namespace, "a")
    assert await exists(core, namespace, "a")

    proxy.add(Rule(faultproxy.lose_response(504), method="PATCH", times=1))
    with pytest.raises(client.ApiException) as timed_out:
        await proxied_core.patch_namespaced_config_map("a", namespace, {"data": {"k": "patched"}})
    assert timed_out.value.status == 504
    patched = await core.read_namespaced_config_map("a", namespace)
    assert patched.data == {"k": "patched"}
    assert [(e.method, e.status, e.fault) for e in proxy.writes()] == [
        ("POST", None, "lose_response"),
        ("PATCH", 504, "lose_response 504"),
    ]


async def test_client_names_tell_clients_of_one_proxy_apart(
    proxy: FaultProxy, through: Callable[..., Awaitable[client.ApiClient]], namespace: str
) -> None:
    replica_a = client.CoreV1Api(await through("replica-a"))
    replica_b = client.CoreV1Api(await through("replica-b"))
    proxy.add(Rule(faultproxy.respond(503), client="replica-a"))
    with pytest.raises(client.ApiException) as refused:
        await replica_a.create_namespaced_config_map(namespace, configmap("a"))
    assert refused.value.status == 503
    await replica_b.create_namespaced_config_map(namespace, configmap("b"))
    assert [(e.client, e.path, e.status) for e in proxy.writes()] == [
        ("replica-a", f"/api/v1/namespaces/{namespace}/configmaps", 503),
        ("replica-b", f"/api/v1/namespaces/{namespace}/configmaps", 201),
    ]
    assert [e.client for e in proxy.writes(client="replica-b")] == ["replica-b"]


async def test_writes_are_recorded_with_their_bodies(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, namespace: str
) -> None:
    await proxied_core.create_namespaced_config_map(namespace, configmap("a"))
    await proxied_core.read_namespaced_config_map("a", namespace)
    await proxied_core.patch_namespaced_config_map("a", namespace, {"data": {"k": "patched"}})
    await proxied_core.delete_namespaced_config_map("a", namespace)
    assert [(e.method, e.status) for e in proxy.writes()] == [("POST", 201), ("PATCH", 200), ("DELETE", 200)]
    (patch,) = proxy.writes(method="PATCH", path=r"/configmaps/a$")
    assert json.loads(patch.request_body) == {"data": {"k": "patched"}}
    assert proxy.writes(path="/pods") == []
    assert len(proxy.exchanges) == 4


async def test_stop_ends_held_requests_and_open_watches_at_once(
    proxy: FaultProxy, proxied_core: client.CoreV1Api, namespace: str
) -> None:
    proxy.add(Rule(faultproxy.hang(), watch=False, path=CONFIGMAPS))
    held = asyncio.create_task(proxied_core.list_namespaced_config_map(namespace))

    async def follow() -> None:
        async with watch.Watch() as stream:
            async for _ in stream.stream(proxied_core.list_namespaced_pod, namespace, timeout_seconds=120):
                pass

    watching = asyncio.create_task(follow())
    await eventually(in_flight(proxy, "hang"), timeout=10, what="the request to be held")
    await eventually(lambda: watch_started(proxy), timeout=10, what="the watch to be open")
    started = time.monotonic()
    await proxy.stop()
    done, _ = await asyncio.wait([held, watching], timeout=5)
    assert time.monotonic() - started < 5 and len(done) == 2
    # The held GET saw the connection close (aiohttp then resends it, to a proxy no longer there).
    assert isinstance(held.exception(), aiohttp.ClientError)
    assert isinstance(watching.exception(), aiohttp.ClientPayloadError)


# -- the docs ----------------------------------------------------------------------------------------
def documented_rules() -> str:
    text = (REPO / "docs" / "dev-cluster.md").read_text()
    (block,) = re.findall(r"^```yaml\n(# faults\.yaml\n.*?)^```", text, re.S | re.M)
    return block


async def patch_status_twice_refused(jobs: Jobs, api: client.ApiClient, name: str) -> None:
    """What the documented rules do to a controller: its first two status writes get a conflict."""
    await jobs.create(pytorchjob(name))
    custom = client.CustomObjectsApi(api)

    async def patch_status() -> int:
        try:
            await custom.patch_namespaced_custom_object_status(
                "kubeflow.org",
                "v1",
                jobs.namespace,
                "pytorchjobs",
                name,
                {"status": {"startTime": "2025-01-01T00:00:00Z"}},
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as exc:
            return int(exc.status)
        return 200

    assert [await patch_status() for _ in range(3)] == [409, 409, 200]
    job = await jobs.get(name)
    assert job is not None and job["status"]["startTime"] == "2025-01-01T00:00:00Z"


@pytest.mark.usefixtures("crds")
async def test_the_documented_command_puts_the_proxy_with_the_documented_rules_in_front_of_a_cluster(
    shell: dict[str, str], jobs: Jobs, tmp_path: Path
) -> None:
    command = documented("docs/dev-cluster.md", "python -m tests.faultinjection.faultproxy")
    (tmp_path / "faults.yaml").write_text(documented_rules())
    log = tmp_path / "faultproxy.log"
    with log.open("w") as stderr:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            f"exec {command}",
            cwd=tmp_path,
            env={**shell, "PYTHONPATH": str(REPO)},  # as from the checkout's root, where the docs run it
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert proc.stdout is not None
    try:
        started = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert started.startswith("fault proxy on https://127.0.0.1:"), (started, log.read_text())
        proxied = tmp_path / "proxied.kubeconfig"
        api = await config.new_client_from_config(config_file=str(proxied))
        async with api:
            await patch_status_twice_refused(jobs, api, "through-the-process")
        # kubectl (client-go) sends its own token to the proxy, which serves HTTPS for that.
        kubectl = await asyncio.create_subprocess_exec(
            "kubectl",
            "get",
            "pytorchjobs",
            "-o",
            "name",
            env={**shell, "KUBECONFIG": str(proxied)},
            stdout=subprocess.PIPE,
        )
        listed, _ = await asyncio.wait_for(kubectl.communicate(), 60)
        assert kubectl.returncode == 0 and listed.decode().split() == [
            "pytorchjob.kubeflow.org/through-the-process"
        ]
    finally:
        proc.send_signal(signal.SIGINT)
        out = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()
        await proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "rule 1 (respond 409) fired 2 times" in out, out


@pytest.mark.usefixtures("crds")
async def test_the_documented_python_example_runs(kubeconfig: Path, jobs: Jobs, tmp_path: Path) -> None:
    (example,) = python_blocks("docs/dev-cluster.md")
    source = (
        example.replace('"~/.cache/kubetrain/dev-cluster/kubeconfig"', repr(str(kubeconfig)))
        .replace('"proxied.kubeconfig"', repr(str(tmp_path / "proxied.kubeconfig")))
        .replace("...  # run the client under test", "await client_under_test(proxied)")
    )
    assert "client_under_test" in source and str(tmp_path) in source

    async def client_under_test(proxied: Path) -> None:
        api = await config.new_client_from_config(config_file=str(proxied))
        async with api:
            await patch_status_twice_refused(jobs, api, "from-the-docs")

    scope: dict[str, Any] = {"client_under_test": client_under_test}
    running = eval(
        compile(source, "docs/dev-cluster.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), scope
    )
    await running
    assert scope["conflicts"].fired == 2
    assert scope["proxy"].rules == ()
