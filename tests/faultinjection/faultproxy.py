"""An HTTP proxy in front of a kube-apiserver that fails chosen requests on purpose.

A controller has to survive what a real API server and a real network do to it: write conflicts,
throttling with ``Retry-After``, 500s and 503s, connections that drop, answers that come late or
never, watches that end mid-stream, and writes that happen although their answer is lost. Waiting
for those to occur by chance proves nothing, so the fault tests make them happen, by rule.

Why a proxy of our own: a TCP-level proxy (toxiproxy and the like) sees bytes, not requests. It can
slow or cut a connection, but it cannot fail one verb on one path, answer a 409 or a 429 in the
API server's own ``Status`` format, or let a write through and then lose its answer. Those faults
need the HTTP request: method, path, query and body, decided per request. Watches and
``?follow=true`` logs are long-lived chunked responses, so the proxy streams every response body
chunk by chunk as it arrives and can keep a watch open for as long as the client wants.

How it is used: the client talks HTTPS to ``127.0.0.1:<port>`` (``write_kubeconfig`` writes a
kubeconfig for that, trusting the proxy's own certificate, from a CA made for this proxy alone); the
proxy forwards the request to the API server over HTTPS, verifying the cluster's CA. It forwards only
requests that carry a credential of their own, so whoever reaches its port acts as nobody but
themselves: a bearer token (passed on as it came, so the API server sees the client's own identity),
or the kubeconfig user's client certificate (kind's users have one), which the client must present
to the proxy, proving it holds the key, before the proxy presents it upstream. Any other request is
answered 401 by the proxy itself. Rules are tried in the order they were added; the first one that matches
and fires decides what happens to the request (``choose`` is that decision, a pure function of the
rules, the request and one seeded ``random.Random``, so a run can be repeated exactly). Every
request is recorded as an ``Exchange``.

Several clients can share one proxy: a base URL ``/_c/<name>`` tags their requests with a client
name that rules can match (the prefix is stripped before forwarding).

As a process, from the root of a checkout, ``python -m tests.faultinjection.faultproxy --kubeconfig K
--write-kubeconfig OUT``
puts a pass-through proxy in front of any cluster; ``--rules FILE`` adds rules from a YAML list
whose entries name an ``action`` (``respond``, ``drop``, ``delay``, ``hang``, ``cut``,
``lose_response``) with its arguments, and the ``Rule`` filters (see ``rules_from_config``).

Not proxied: connection upgrades (``exec``, ``attach``, ``port-forward``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import random
import re
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

import aiohttp
import yaml
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from tests.faultinjection.faultrules import (
    Action,
    Call,
    Cut,
    Delay,
    Drop,
    Hang,
    LoseResponse,
    Respond,
    Rule,
    choose,
    cut,
    delay,
    drop,
    hang,
    load_rules,
    lose_response,
    respond,
    rules_from_config,
    status_body,
)

__all__ = [
    "UNAUTHENTICATED",
    "Action",
    "Call",
    "Cut",
    "Delay",
    "Drop",
    "Exchange",
    "FaultProxy",
    "Hang",
    "LoseResponse",
    "Respond",
    "Rule",
    "Upstream",
    "choose",
    "cut",
    "delay",
    "drop",
    "forwarded_headers",
    "hang",
    "load_rules",
    "lose_response",
    "main",
    "proxied_config",
    "read_upstream",
    "respond",
    "rules_from_config",
    "split_client",
    "status_body",
    "upstream_ssl_context",
]

log = logging.getLogger(__name__)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
UNAUTHENTICATED = (
    "the fault proxy forwards only requests with a credential of their own "
    "(a bearer token or the kubeconfig's client certificate)"
)
CLIENT_PREFIX = "/_c/"
_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Headers that belong to one connection, not to the request (RFC 9110 section 7.6.1), plus Host
# (the upstream session sets its own) and Content-Length (recomputed for what is actually sent).
_NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30)
_MAX_REQUEST_BODY = 64 * 2**20


# -- HTTP plumbing ---------------------------------------------------------------------------------
def split_client(raw_path: str) -> tuple[str | None, str]:
    """``/_c/<name>/rest`` -> (name, ``/rest``); any other path -> (None, path)."""
    if not raw_path.startswith(CLIENT_PREFIX):
        return None, raw_path
    name, slash, rest = raw_path[len(CLIENT_PREFIX) :].partition("/")
    if not _CLIENT_NAME.fullmatch(name):
        return None, raw_path
    return name, slash + rest if slash else "/"


def forwarded_headers(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """The end-to-end headers of a message: hop-by-hop ones, those its Connection header names,
    Host and Content-Length are left out; everything else (Authorization included) is kept."""
    pairs = list(headers)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return CIMultiDict((n, v) for n, v in pairs if n.lower() not in _NOT_FORWARDED and n.lower() not in named)


# -- kubeconfig --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Upstream:
    """Where the API server is, how to trust it, and the kubeconfig user's client certificate,
    presented upstream for the requests of a client that presented it to the proxy."""

    server: str
    ca_pem: bytes | None = None
    insecure: bool = False
    server_name: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)


def _named(config: Mapping[str, Any], kind: str, name: str) -> dict[str, Any]:
    for entry in config.get(kind + "s") or []:
        if entry.get("name") == name:
            return dict(entry.get(kind) or {})
    raise ValueError(f"the kubeconfig has no {kind} named {name!r}")


def _context(config: Mapping[str, Any], context: str | None) -> dict[str, Any]:
    name = context or config.get("current-context")
    if not name:
        raise ValueError("the kubeconfig names no current context")
    return _named(config, "context", name)


def _pem(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return (base / Path(entry[key]).expanduser()).read_bytes()
    return None


def read_upstream(config: Mapping[str, Any], base: Path, context: str | None = None) -> Upstream:
    """The API server of a kubeconfig's (current) context; file paths in it are relative to ``base``."""
    chosen = _context(config, context)
    cluster = _named(config, "cluster", chosen["cluster"])
    user = _named(config, "user", chosen["user"]) if chosen.get("user") else {}
    if not cluster.get("server"):
        raise ValueError(f"cluster {chosen['cluster']!r} has no server")
    return Upstream(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=_pem(cluster, "certificate-authority", base),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        server_name=cluster.get("tls-server-name"),
        client_cert_pem=_pem(user, "client-certificate", base),
        client_key_pem=_pem(user, "client-key", base),
    )


def proxied_config(
    config: Mapping[str, Any], server: str, ca_pem: bytes, context: str | None = None
) -> dict[str, Any]:
    """A copy of a kubeconfig whose (current) context's cluster is ``server``, trusting ``ca_pem``
    (the proxy's): the other TLS settings of that cluster are gone, the users are as they were."""
    copied: dict[str, Any] = json.loads(json.dumps(config))
    cluster_name = _context(copied, context)["cluster"]
    for entry in copied.get("clusters") or []:
        if entry.get("name") == cluster_name:
            cluster = entry.setdefault("cluster", {})
            for key in (
                "certificate-authority",
                "certificate-authority-data",
                "insecure-skip-tls-verify",
                "tls-server-name",
            ):
                cluster.pop(key, None)
            cluster["server"] = server
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    if context is not None:
        copied["current-context"] = context
    return copied


def upstream_ssl_context(upstream: Upstream, *, client_cert: bool = True) -> ssl.SSLContext | bool:
    """TLS towards the API server: its CA trusted, the user's client certificate presented (unless
    ``client_cert`` is False: the requests that carry a token of their own)."""
    if not upstream.server.startswith("https:"):
        return True  # unused for plain http
    context = ssl.create_default_context(cadata=upstream.ca_pem.decode() if upstream.ca_pem else None)
    if upstream.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert and upstream.client_cert_pem and upstream.client_key_pem:
        _load_chain(context, upstream.client_cert_pem, upstream.client_key_pem)
    return context


def _load_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    # load_cert_chain reads files only: write them where only we can read, for a moment.
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert.write_bytes(cert_pem)
        key.touch(0o600)
        key.write_bytes(key_pem)
        context.load_cert_chain(cert, key)


def _der(pem: bytes | None) -> bytes | None:
    return ssl.PEM_cert_to_DER_cert(pem.decode()) if pem else None


# -- the record --------------------------------------------------------------------------------------
@dataclass
class Exchange:
    """One request through the proxy and what became of it (times are ``time.monotonic()``)."""

    client: str | None
    method: str
    path: str
    query: dict[str, str]
    request_body: bytes
    started: float
    status: int | None = None  # None: the client got no answer (dropped, cut before the head, gone)
    fault: str | None = None
    rule: Rule | None = None
    finished: float | None = None

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS


# -- the proxy ---------------------------------------------------------------------------------------
class FaultProxy:
    """The proxy for one API server. ``start()`` it, point clients at ``url`` (or a kubeconfig from
    ``write_kubeconfig``), ``add`` rules, read ``exchanges``, ``stop()`` it."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        seed: int = 0,
        kubeconfig: Mapping[str, Any] | None = None,
        context: str | None = None,
        port: int = 0,
    ) -> None:
        self.upstream = upstream
        self.exchanges: list[Exchange] = []
        self._rules: list[Rule] = []
        self._chance = random.Random(seed)
        self._kubeconfig = kubeconfig
        self._context = context
        self._port = port
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None  # for requests with a token
        self._cert_session: aiohttp.ClientSession | None = None  # presents the user's certificate
        self._client_cert_der = _der(upstream.client_cert_pem) if upstream.client_key_pem else None
        self._ca_pem: bytes | None = None
        self._serving: tuple[bytes, bytes, bytes] | None = None  # the CA's, certificate's, key's PEM
        self._url: str | None = None
        self._released = asyncio.Event()
        self._in_flight: set[asyncio.Task[Any]] = set()

    @classmethod
    def for_kubeconfig(
        cls, kubeconfig: Path, *, seed: int = 0, context: str | None = None, port: int = 0
    ) -> FaultProxy:
        """A proxy for the API server of ``kubeconfig``'s (current) context, trusting its CA."""
        config = yaml.safe_load(Path(kubeconfig).read_text())
        upstream = read_upstream(config, Path(kubeconfig).parent, context)
        return cls(upstream, seed=seed, kubeconfig=config, context=context, port=port)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on a loopback port (the one given, else a free one)."""
        if self._runner is not None:
            raise RuntimeError("the fault proxy is already started")
        self._session = _client_session(upstream_ssl_context(self.upstream, client_cert=False))
        if self._client_cert_der is not None:
            self._cert_session = _client_session(upstream_ssl_context(self.upstream))
        app = web.Application(client_max_size=_MAX_REQUEST_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that goes away cancels its request here, and so upstream.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._port, ssl_context=self._serving_context())
        await site.start()
        self._runner = runner
        port = runner.addresses[0][1]
        self._url = f"https://127.0.0.1:{port}"
        log.info("fault proxy on %s for %s", self._url, self.upstream.server)

    def _serving_context(self) -> ssl.SSLContext:
        """HTTPS, so that clients send their credentials (client-go sends none to plain HTTP), with a
        certificate of the proxy's own; a client may present the kubeconfig user's certificate."""
        from kubetrain.devcluster import certs  # cryptography, only where a proxy starts

        if self._serving is None:  # one for the proxy's life: its kubeconfigs outlive a stop and start
            self._serving = certs.throwaway_serving("kubetrain-fault-proxy")
        self._ca_pem, cert_pem, key_pem = self._serving
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        _load_chain(context, cert_pem, key_pem)
        if self.upstream.client_cert_pem and self._client_cert_der is not None:
            # Taken only when it verifies (it is compared with the kubeconfig's in ``_credential``).
            context.verify_mode = ssl.CERT_OPTIONAL
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            context.load_verify_locations(
                cadata=((self.upstream.ca_pem or b"") + b"\n" + self.upstream.client_cert_pem).decode()
            )
        return context

    @property
    def ca_pem(self) -> bytes:
        """The CA of the proxy's serving certificate, which its clients trust."""
        if self._ca_pem is None:
            raise RuntimeError("the fault proxy is not started")
        return self._ca_pem

    async def stop(self) -> None:
        """Close every connection (held requests and open streams end at once) and stop listening."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for site in list(runner.sites):
            await site.stop()
        in_flight = list(self._in_flight)
        for task in in_flight:
            task.cancel()
        if in_flight:
            await asyncio.wait(in_flight, timeout=5)
        await runner.cleanup()
        for session in (self._session, self._cert_session):
            if session is not None:
                await session.close()
        self._session = self._cert_session = None

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT``."""
        if self._url is None:
            raise RuntimeError("the fault proxy is not started")
        return self._url

    def client_url(self, client: str) -> str:
        """A base URL whose requests are tagged ``client`` (for rules and exchanges)."""
        if not _CLIENT_NAME.fullmatch(client):
            raise ValueError(f"client name {client!r}: letters, digits, '.', '_' and '-' only")
        return f"{self.url}{CLIENT_PREFIX}{client}"

    def write_kubeconfig(self, dest: Path, *, client: str | None = None) -> Path:
        """Write a copy of the source kubeconfig that goes through the proxy (as ``client``)."""
        if self._kubeconfig is None:
            raise RuntimeError("the fault proxy was not made from a kubeconfig")
        server = self.client_url(client) if client is not None else self.url
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.touch(0o600)
        dest.write_text(
            yaml.safe_dump(
                proxied_config(self._kubeconfig, server, self.ca_pem, self._context), sort_keys=False
            )
        )
        return dest

    # -- rules -----------------------------------------------------------------------------------
    def add(self, rule: Rule) -> Rule:
        """Add a rule after the existing ones; returns it (read ``rule.fired``, ``remove`` it later)."""
        self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        self._rules = [r for r in self._rules if r is not rule]

    def clear(self) -> None:
        """Remove every rule: from now on the proxy passes everything through."""
        self._rules = []

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(self._rules)

    def release(self) -> None:
        """Forward every request held by ``hang`` now."""
        released, self._released = self._released, asyncio.Event()
        released.set()

    def writes(
        self, client: str | None = None, method: str | None = None, path: str | None = None
    ) -> list[Exchange]:
        """Recorded writes (POST, PUT, PATCH, DELETE), optionally of one client, one method, and a
        path matching the regular expression ``path``."""
        pattern = re.compile(path) if path is not None else None
        return [
            e
            for e in self.exchanges
            if e.is_write
            and (client is None or e.client == client)
            and (method is None or e.method == method.upper())
            and (pattern is None or pattern.search(e.path) is not None)
        ]

    # -- serving ---------------------------------------------------------------------------------
    def _credential(self, request: web.BaseRequest) -> aiohttp.ClientSession | None:
        """The session a request goes upstream on: the one presenting the user's certificate for a
        client that presented it here, the plain one for a request with its own ``Authorization``;
        None for a request with neither, which is not forwarded."""
        tls = request.transport.get_extra_info("ssl_object") if request.transport else None
        presented = tls.getpeercert(binary_form=True) if tls is not None else None
        if presented is not None and presented == self._client_cert_der and self._cert_session is not None:
            return self._cert_session
        if request.headers.get("Authorization", "").strip():
            return self._session
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self._credential(request) is None:
            log.warning("refused %s %s: no credential of its own", request.method, request.raw_path)
            return web.json_response(
                status_body(401, reason="Unauthorized", message=UNAUTHENTICATED, retry_after=None), status=401
            )
        raw_target = request.raw_path
        raw_path, _, raw_query = raw_target.partition("?")
        client, raw_path = split_client(raw_path)
        body = await request.read()
        call = Call(
            method=request.method,
            path=unquote(raw_path),
            query=dict(parse_qsl(raw_query, keep_blank_values=True)),
            body=body,
            client=client,
        )
        exchange = Exchange(
            client=client,
            method=call.method,
            path=call.path,
            query=dict(call.query),
            request_body=body if call.method in WRITE_METHODS else b"",
            started=time.monotonic(),
        )
        self.exchanges.append(exchange)
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        target = URL(self.upstream.server + raw_path + (f"?{raw_query}" if raw_query else ""), encoded=True)
        try:
            rule = choose(self._rules, call, self._chance)
            if rule is not None:
                exchange.rule, exchange.fault = rule, rule.action.describe()
                log.info("fault %s: %s %s", exchange.fault, call.method, raw_target)
            return await self._act(rule.action if rule else None, request, target, body, exchange)
        except _UpstreamError as exc:
            log.warning("%s", exc)
            return self._answer(exchange, 502, reason="", message=str(exc))
        finally:
            exchange.finished = time.monotonic()
            self._in_flight.discard(task)

    async def _act(
        self, action: Action | None, request: web.Request, target: URL, body: bytes, exchange: Exchange
    ) -> web.StreamResponse:
        match action:
            case Respond(status, reason, message, retry_after):
                return self._answer(exchange, status, reason=reason, message=message, retry_after=retry_after)
            case Drop():
                return _hang_up(request)
            case Cut(after):
                return await self._forward(request, target, body, exchange, cut_after=after)
            case LoseResponse(status):
                return await self._lose_response(request, target, body, exchange, status)
            case Delay(seconds):
                await asyncio.sleep(seconds)
            case Hang(seconds):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._released.wait(), seconds)
        return await self._forward(request, target, body, exchange)  # no fault, or after a delay or a hang

    async def _lose_response(
        self, request: web.Request, target: URL, body: bytes, exchange: Exchange, status: int | None
    ) -> web.StreamResponse:
        """Forward and read the API server's answer, then drop the connection or answer ``status``."""
        upstream = await self._open(request, target, body)
        try:
            await upstream.read()
        except aiohttp.ClientError as exc:
            raise _UpstreamError(f"the API server broke off its answer: {exc}") from exc
        finally:
            upstream.release()
        log.info("the API server answered %s; the client will not know", upstream.status)
        if status is None:
            return _hang_up(request)
        return self._answer(exchange, status, reason=None, message="injected by the fault proxy")

    def _answer(
        self,
        exchange: Exchange,
        status: int,
        *,
        reason: str | None,
        message: str,
        retry_after: int | None = None,
    ) -> web.Response:
        exchange.status = status
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        return web.json_response(
            status_body(status, reason=reason, message=message, retry_after=retry_after),
            status=status,
            headers=headers,
        )

    async def _open(self, request: web.Request, target: URL, body: bytes) -> aiohttp.ClientResponse:
        """Send the request on; the response's head has arrived when this returns."""
        session = self._credential(request)
        assert session is not None  # ``_handle`` refused the request otherwise
        headers = forwarded_headers(request.headers.items())
        try:
            return await session.request(
                request.method,
                target,
                headers=headers,
                data=body if request.method not in ("GET", "HEAD") or body else None,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
                allow_redirects=False,
                server_hostname=self.upstream.server_name,
            )
        except (aiohttp.ClientError, OSError) as exc:
            raise _UpstreamError(f"the fault proxy cannot reach the API server: {exc}") from exc

    async def _forward(
        self,
        request: web.Request,
        target: URL,
        body: bytes,
        exchange: Exchange,
        *,
        cut_after: float | None = None,
    ) -> web.StreamResponse:
        upstream = await self._open(request, target, body)
        complete = False
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.extend(forwarded_headers(upstream.headers.items()))
            if "Content-Length" in upstream.headers and request.method != "HEAD":
                response.content_length = int(upstream.headers["Content-Length"])
            exchange.status = upstream.status
            try:
                await response.prepare(request)
            except ConnectionError:
                return response  # the client is gone
            copying = _copy(upstream, response)
            if cut_after is None:
                complete = await copying
            else:
                try:
                    complete = await asyncio.wait_for(copying, cut_after)
                except TimeoutError:
                    log.info("cut %s %s after %gs", request.method, exchange.path, cut_after)
            if not complete:
                return _hang_up(request, response)
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
            return response
        finally:
            if complete:
                upstream.release()
            else:
                upstream.close()


def _client_session(tls: ssl.SSLContext | bool) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=tls),
        timeout=_UPSTREAM_TIMEOUT,
        auto_decompress=False,  # bytes pass through as the API server encoded them
        read_bufsize=2**21,
    )


class _UpstreamError(Exception):
    """The API server could not be reached or broke off: the client gets a 502."""


async def _copy(upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> bool:
    """Pass the body on chunk by chunk as it arrives; False if either side broke off."""
    try:
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    except (aiohttp.ClientError, ConnectionError):
        return False
    return True


def _hang_up(request: web.BaseRequest, response: web.StreamResponse | None = None) -> web.StreamResponse:
    """Close the client's connection without (another) word; aiohttp's attempt to finish the response
    then finds the connection gone and lets it be."""
    request.protocol.force_close()
    return response if response is not None else web.Response()


# -- as a process ------------------------------------------------------------------------------------
async def _serve(args: argparse.Namespace) -> None:
    proxy = FaultProxy.for_kubeconfig(args.kubeconfig, seed=args.seed, context=args.context, port=args.port)
    for rule in load_rules(args.rules) if args.rules else []:
        proxy.add(rule)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    await proxy.start()
    written = proxy.write_kubeconfig(args.write_kubeconfig)
    print(f"fault proxy on {proxy.url} for {proxy.upstream.server}; kubeconfig: {written}", flush=True)
    try:
        await stopping.wait()
    finally:
        await proxy.stop()
        for number, rule in enumerate(proxy.rules, 1):
            print(f"rule {number} ({rule.action.describe()}) fired {rule.fired} times", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faultinjection.faultproxy",
        description="Put a fault-injecting HTTPS proxy in front of a cluster's API server.",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser(),
        help="kubeconfig of the cluster to proxy (default: $KUBECONFIG)",
    )
    parser.add_argument("--context", help="context of the kubeconfig (default: its current context)")
    parser.add_argument(
        "--write-kubeconfig",
        type=Path,
        required=True,
        help="where to write the kubeconfig that uses the proxy",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="loopback port to listen on (default: a free one)"
    )
    parser.add_argument("--rules", type=Path, help="YAML list of rules (default: none, a plain pass-through)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the rules' random choices")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    try:
        asyncio.run(_serve(args))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
