"""``JobClient``: the same verbs as ``AsyncJobClient``, for code that is not async.

Airflow's ``execute`` and KFP's component functions are synchronous. Rather than
write the client twice, every call runs the async client's coroutine on an event
loop of its own in a background thread; generators (watch, follow_logs) are
bridged item by item. Safe to use from a thread that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from kubetrain.client.aio import AsyncJobClient

P = ParamSpec("P")
T = TypeVar("T")
_END = object()


def _blocking(
    method: Callable[Concatenate[AsyncJobClient, P], Awaitable[T]],
) -> Callable[Concatenate[JobClient, P], T]:
    """The async client's ``method``, run on the client's loop until it returns."""

    @functools.wraps(method)
    def call(self: JobClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._async, *args, **kwargs))

    return call


def _bridged(
    method: Callable[Concatenate[AsyncJobClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[JobClient, P], Iterator[T]]:
    """The async client's generator ``method``, bridged item by item."""

    @functools.wraps(method)
    def call(self: JobClient, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._iterate(method(self._async, *args, **kwargs))

    return call


class JobClient:
    def __init__(self, connect: Callable[[], Awaitable[AsyncJobClient]]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kubetrain-client", daemon=True)
        self._thread.start()
        self._async = self._run(connect())

    @classmethod
    def connect(cls, **kwargs: Any) -> JobClient:
        """Arguments as ``AsyncJobClient.connect`` (kubeconfig, context, config_dict, in_cluster)."""
        return cls(lambda: AsyncJobClient.connect(**kwargs))

    def _run(self, coroutine: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()  # type: ignore[arg-type]

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> Any:
            try:
                return await agen.__anext__()
            except StopAsyncIteration:
                return _END

        while True:
            item = self._run(step())
            if item is _END:
                return
            yield item

    @property
    def aio(self) -> AsyncJobClient:
        return self._async

    def run(self, coroutine: Awaitable[T]) -> T:
        """Run a coroutine that uses ``aio`` on this client's loop, and return its result."""
        return self._run(coroutine)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._async.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The verbs: each the async client's, with its signature and docstring.
    create = _blocking(AsyncJobClient.create)
    create_supporting = _blocking(AsyncJobClient.create_supporting)
    get = _blocking(AsyncJobClient.get)
    require = _blocking(AsyncJobClient.require)
    list = _blocking(AsyncJobClient.list)
    delete = _blocking(AsyncJobClient.delete)
    set_suspended = _blocking(AsyncJobClient.set_suspended)
    resubmit = _blocking(AsyncJobClient.resubmit)
    annotate = _blocking(AsyncJobClient.annotate)
    prepare_attempt = _blocking(AsyncJobClient.prepare_attempt)
    watch = _bridged(AsyncJobClient.watch)
    wait = _blocking(AsyncJobClient.wait)
    check = _blocking(AsyncJobClient.check)
    logs = _blocking(AsyncJobClient.logs)
    curves = _blocking(AsyncJobClient.curves)
    follow_logs = _bridged(AsyncJobClient.follow_logs)
    pods = _blocking(AsyncJobClient.pods)
    disruption = _blocking(AsyncJobClient.disruption)
    pods_matching = _blocking(AsyncJobClient.pods_matching)
    pending_reasons = _blocking(AsyncJobClient.pending_reasons)
    admission_wait = _blocking(AsyncJobClient.admission_wait)
    events = _blocking(AsyncJobClient.events)

    report = staticmethod(AsyncJobClient.report)
