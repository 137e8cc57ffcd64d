"""The one adapter between the controller and ``kubernetes_asyncio``.

Why raw dictionaries: deserialising every watch event into generated models is
the known CPU hot spot of Python Kubernetes clients (thousands of pods), so
the informers and reconcilers work on plain dicts and only this module talks
HTTP. ``kubernetes_asyncio`` still does what is hard: kubeconfig and in-cluster
auth, token refresh, TLS and the aiohttp session; ``kubetrain.kube.lean`` imports
just those parts of it, not its generated API and models.

Why token buckets of our own: no Python Kubernetes client limits its own
request rate, and a controller that bursts thousands of creates at startup is
what API Priority and Fairness then throttles for everyone. ``--kube-api-qps``
and ``--kube-api-burst`` bound it here, as client-go does for Go controllers:
per API kind, as a controller-runtime client's REST clients do.
Server-side throttling (429) and transient 5xx answers are retried with
``Retry-After`` honoured, unless a call asks for a single attempt (``retries=0``,
as the lease calls of leader election do: a hidden retry would outlast the
renew deadline that bounds them). Events get a bucket of their own
(``with_own_budget``), as client-go's recorder does.

Why the environment is read once: ``kubernetes_asyncio`` opens its aiohttp session with
``trust_env=True``, and such a session looks up ``~/.netrc`` and the proxy variables on every request,
each in a thread of the default executor (aiohttp 3.14 does). For a controller that is a third of its CPU
at thousands of pods (two thread hops a request, a ``LookupError`` when, as usual, there is no proxy).
``settle_environment`` (which ``from_kubeconfig`` and the job client's ``connect`` call) resolves the
proxy for the API server once, as client-go does (it reads ``HTTPS_PROXY``/``NO_PROXY`` once a process,
and never a netrc: Kubernetes credentials come from the kubeconfig), and gives the transport a session
on the same connection pool that looks up nothing.

Why a write guard: with leader election, a replica that was frozen (SIGSTOP,
a long pause) may resume after another replica took over. The guard, consulted
before every mutating request leaves the process, refuses it then with
``WriteFencedError`` (see ``leader.LeaderElector.fence``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import aiohttp

from kubetrain.kube import errors, lean, observer
from kubetrain.kube.resources import Resource

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config
else:  # the transport and kubeconfig loading only: see kubetrain.kube.lean
    k8s_client, k8s_config = lean.load()

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
RETRIES = 5
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

READ_BUFSIZE = 2**21  # as kubernetes_asyncio's session: a watch event of a large object outgrows the default

WriteGuard = Callable[[], str | None]


class Selection(TypedDict, total=False):
    """Which objects of a resource a list or a watch asks for: every one, or those in one namespace,
    matching a label selector and a field selector (an informer asks for the same in both)."""

    namespace: str | None
    label_selector: str | None
    field_selector: str | None


def _selected(resource: Resource, selection: Selection) -> tuple[str, dict[str, Any]]:
    """The path and the query parameters of a selection."""
    query = {
        "labelSelector": selection.get("label_selector"),
        "fieldSelector": selection.get("field_selector"),
    }
    return resource.path(selection.get("namespace")), query


def env_proxy(server: str) -> tuple[str | None, dict[str, str]]:
    """The proxy the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``) names for the API
    server at ``server``, and the headers that carry its credentials (the proxy URL's user and password):
    ``(None, {})`` when there is none or the server is exempt."""
    url = urllib.parse.urlsplit(server)
    proxy = urllib.request.getproxies().get(url.scheme)
    if not proxy or urllib.request.proxy_bypass(url.hostname or ""):
        return None, {}
    parsed = urllib.parse.urlsplit(proxy)
    if parsed.username is None:
        return proxy, {}
    bare = parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]).geturl()
    login = f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
    return bare, {"Proxy-Authorization": "Basic " + base64.b64encode(login.encode()).decode()}


class WriteFencedError(Exception):
    """A write the client's guard refused before it was sent (this replica may no longer lead)."""

    def __init__(self, reason: str, *, method: str, path: str) -> None:
        self.reason = reason
        self.method = method
        self.path = path
        super().__init__(f"{method} {path}: refused: {reason}")


class TokenBucket:
    """Allows ``qps`` requests per second on average and bursts of ``burst``; ``qps <= 0`` disables it."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()

    def reserve(self) -> float:
        """Take a token; return how long the caller must wait before using it."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> float:
        wait = self.reserve()
        if wait > 0:
            observer.current().api_throttled(wait)
            await asyncio.sleep(wait)
        return wait


def limited_kind(path: str) -> str:
    """The API kind a request path is for (``v1/pods``, ``kubeflow.org/v1/pytorchjobs``): its
    subresources (``/status``, ``/log``) and its namespace do not change it."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        group_version, rest = parts[1:2], parts[2:]
    else:
        group_version, rest = parts[1:3], parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]  # a namespaced resource; "namespaces" alone or with a name is the Namespace kind
    return "/".join([*group_version, *rest[:1]])


class RateLimits:
    """A token bucket per API kind, each of ``qps`` and ``burst``; ``qps <= 0`` disables them.

    What a controller-runtime operator's client does (one REST client per kind, each with a client-go
    rate limiter of its own), so ``--kube-api-qps`` means for kubetrain what it means for the upstream
    operator: the pods a job needs are created at QPS while its services and its status writes go at
    the same pace beside them, instead of each waiting for the other.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def of(self, path: str) -> TokenBucket:
        kind = limited_kind(path)
        bucket = self._buckets.get(kind)
        if bucket is None:
            bucket = self._buckets[kind] = TokenBucket(self.qps, self.burst, self._clock)
        return bucket


def settle_environment(api: k8s_client.ApiClient) -> aiohttp.ClientSession | None:
    """Give ``api`` a session that looks up neither a netrc nor the proxy variables per request (see the
    module docstring), on the same connection pool, with the proxy its configuration names, else the
    environment's for its host, resolved here, once. Returns the session it replaced, which owns the
    pool: its owner closes it after ``api`` (None when ``api`` had no such session)."""
    rest = api.rest_client
    env_session: aiohttp.ClientSession = rest.pool_manager
    if not env_session.trust_env:
        return None
    proxy, headers = (None, {}) if rest.proxy else env_proxy(api.configuration.host or "")
    if proxy is not None:
        rest.proxy, rest.proxy_headers = proxy, rest.proxy_headers or headers
    rest.pool_manager = aiohttp.ClientSession(
        connector=env_session.connector,
        connector_owner=False,  # closing the session it replaces closes the pool
        read_bufsize=READ_BUFSIZE,
    )
    return env_session


async def close_api(api: k8s_client.ApiClient, replaced: aiohttp.ClientSession | None) -> None:
    """Close ``api``, then the session ``settle_environment`` replaced in it (which owns the pool)."""
    await api.close()
    if replaced is not None:
        await replaced.close()


async def _body(response: aiohttp.ClientResponse, method: str, path: str) -> bytes:
    """The whole body of ``response``, released. An answer cut off on its way (the API server stopped
    or restarted, a proxy broke off) is an ``APIServerError`` like a connection lost before it, not
    aiohttp's own error: every caller already treats an ``APIError`` as transient, and a loop that
    let aiohttp's through would die of it. Not retried here: a write may already have been applied."""
    try:
        return await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise errors.APIServerError(0, f"the answer was cut off: {exc}", method=method, path=path) from exc
    finally:
        response.release()


class KubeClient:
    """Raw-JSON verbs over one authenticated session.

    ``write_guard``, when set, is asked before every POST, PUT, PATCH and DELETE (each retry included):
    it returns None to let the request go, or the reason to refuse it with ``WriteFencedError``.
    """

    def __init__(self, api: k8s_client.ApiClient, *, qps: float = 0, burst: int = 0) -> None:
        self.api = api
        self.limits = RateLimits(qps, burst)
        self.write_guard: WriteGuard | None = None
        self._owns_session = True
        self._env_session: aiohttp.ClientSession | None = None  # what ``settle_environment`` replaced

    def with_own_budget(self) -> KubeClient:
        """A client on the same session and write guard, with a rate limiter of its own (same QPS and
        burst): what client-go's event recorder gets, so Events never eat the budget of the writes that
        do the work. Closing it leaves the session open; the client it came from owns that."""
        sibling = KubeClient(self.api, qps=self.limits.qps, burst=self.limits.burst)
        sibling._owns_session = False
        sibling.write_guard = lambda: self.write_guard() if self.write_guard is not None else None
        return sibling

    @classmethod
    async def from_kubeconfig(
        cls, path: str | None = None, *, qps: float = 0, burst: int = 0, connections: int | None = None
    ) -> KubeClient:
        """In-cluster config when running in a pod, else the kubeconfig (``path``, ``$KUBECONFIG``, ~/.kube).

        ``connections`` caps the pooled connections to the API server (kubernetes_asyncio's default is
        100): each costs a TLS read buffer, so a client that sends many requests at once holds that many."""
        config: k8s_client.Configuration | None = None
        if path is None:
            try:
                k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
                config = k8s_client.Configuration.get_default_copy()
            except k8s_config.ConfigException:
                pass
        if config is None:
            config = k8s_client.Configuration()
            await k8s_config.load_kube_config(config_file=path, client_configuration=config)
        if connections is not None:
            config.connection_pool_maxsize = connections
        api = k8s_client.ApiClient(config)
        kube = cls(api, qps=qps, burst=burst)
        kube._env_session = settle_environment(api)
        return kube

    async def close(self) -> None:
        if self._owns_session:
            await close_api(self.api, self._env_session)

    # -- transport -------------------------------------------------------------------------------
    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | None = 60,
        retries: int = RETRIES,
        resource: str = "",
    ) -> aiohttp.ClientResponse:
        headers = {"Content-Type": content_type, "Accept": accept}
        params = [
            (k, str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in (query or {}).items()
            if v is not None
        ]
        for attempt in range(retries + 1):
            await self.limits.of(path).acquire()
            if method in MUTATING and self.write_guard is not None:
                refused = self.write_guard()  # checked after any wait for the rate limiter
                if refused is not None:
                    raise WriteFencedError(refused, method=method, path=path)
            started = time.monotonic()
            try:
                response: aiohttp.ClientResponse = await self.api.call_api(
                    path,
                    method,
                    query_params=params,
                    header_params=dict(headers),
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout if timeout else None,
                )
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                observer.current().api_request(method, resource, "error", None)
                if attempt == retries:
                    reason = str(exc) or type(exc).__name__  # a timeout says nothing by itself
                    raise errors.APIServerError(0, reason, method=method, path=path) from exc
                await asyncio.sleep(min(0.2 * 2**attempt, 5))
                continue
            observer.current().api_request(method, resource, str(response.status), time.monotonic() - started)
            if response.status < 400:
                return response
            raw = await _body(response, method, path)
            error = errors.for_status(response.status, raw, method=method, path=path)
            retryable = response.status == 429 or response.status >= 500
            if not retryable or attempt == retries:
                raise error
            retry_after = response.headers.get("Retry-After", "")
            delay = float(retry_after) if retry_after.isdigit() else min(0.2 * 2**attempt, 5)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def request(self, method: str, path: str, *, resource: str = "", **kwargs: Any) -> Obj:
        response = await self._send(method, path, resource=resource, **kwargs)
        raw = await _body(response, method, path)
        result: Obj = json.loads(raw) if raw else {}
        return result

    # -- verbs -----------------------------------------------------------------------------------
    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return await self.request("GET", resource.path(namespace, name), resource=str(resource))
        except errors.APINotFoundError:
            return None

    async def list(
        self,
        resource: Resource,
        *,
        page_size: int = 500,
        transform: Callable[[Obj], Obj] | None = None,
        **selection: Unpack[Selection],
    ) -> tuple[list[Obj], str]:
        """Every object (paginated); returns the items and the list's resourceVersion.

        ``transform``, when given, is applied to each page's items as the page arrives, so what an
        informer caches of a large list is all that stays in memory, not every object as sent."""
        path, selectors = _selected(resource, selection)
        items: list[Obj] = []
        token: str | None = None
        while True:
            page = await self.request(
                "GET",
                path,
                resource=str(resource),
                timeout=120,
                query={**selectors, "limit": page_size, "continue": token},
            )
            page_items = page.get("items") or []
            items.extend(map(transform, page_items) if transform is not None else page_items)
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items, page.get("metadata", {}).get("resourceVersion", "")

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        **selection: Unpack[Selection],
    ) -> AsyncIterator[Obj]:
        """Watch events as dicts (``type``, ``object``); ends when the server closes the stream.

        Bookmarks are requested, so a quiet watch still advances its resourceVersion.
        A 410 Gone, in the HTTP status or as an ERROR event, raises ``APIGoneError``.
        """
        path, selectors = _selected(resource, selection)
        query = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
            **selectors,
        }
        response = await self._send("GET", path, query=query, resource=str(resource), timeout=None)
        try:
            partial = b""  # the start of a line whose end has not come yet
            async for chunk in response.content.iter_any():
                # One split per chunk: a controller that fell behind gets megabytes of events at once,
                # and splitting off one line at a time would copy the rest of the chunk for each.
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event: Obj = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object", {})
                        code = int(status.get("code", 500))
                        raise errors.for_status(code, json.dumps(status).encode(), method="WATCH", path=path)
                    yield event
        finally:
            response.release()

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        return await self.request("POST", resource.path(namespace), body=body, resource=str(resource))

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> Obj:
        query: dict[str, Any] = {"fieldManager": field_manager, "force": force}
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=body,
            query=query,
            content_type=content_type,
            resource=str(resource),
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        propagation: str | None = "Background",
        grace_period_seconds: int | None = None,
    ) -> bool:
        """Delete; returns False when it was already gone. ``uid`` makes it a precondition.

        A 409 is taken to mean "that object is gone" only after a read agrees: the API server answers
        409 when the uid precondition fails (the name now holds another object), but a 409 can mean
        other things, and trusting it blindly would leave the object in place with nobody retrying.
        """
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self.request("DELETE", resource.path(namespace, name), body=body, resource=str(resource))
        except errors.APINotFoundError:
            return False
        except errors.APIConflictError:
            current = await self.get(resource, name, namespace)
            if uid is not None and (current is None or current["metadata"].get("uid") != uid):
                return False  # the uid precondition failed: that object is already gone
            raise
        return True
