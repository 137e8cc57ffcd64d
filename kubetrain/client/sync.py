"""``JobClient``: the same verbs as ``AsyncJobClient``, for code that is not async.

Airflow's ``execute`` and KFP's component functions are synchronous. Rather than
write the client twice, every call runs the async client's coroutine on an event
loop of its own in a background thread; generators (watch, follow_logs) are
bridged item by item. Safe to use from a thread that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from kubetrain.api.base import ApiModel
from kubetrain.client import lineage
from kubetrain.client.aio import AsyncJobClient

Obj = dict[str, Any]
T = TypeVar("T")
_END = object()


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

    def create(self, manifest: Obj | ApiModel, *, namespace: str | None = None, dry_run: bool = False) -> Obj:
        return self._run(self._async.create(manifest, namespace=namespace, dry_run=dry_run))

    def create_supporting(self, manifest: Obj, *, namespace: str, dry_run: bool = False) -> str:
        return self._run(self._async.create_supporting(manifest, namespace=namespace, dry_run=dry_run))

    def get(self, kind: str, name: str, namespace: str) -> Obj | None:
        return self._run(self._async.get(kind, name, namespace))

    def require(self, kind: str, name: str, namespace: str) -> Obj:
        return self._run(self._async.require(kind, name, namespace))

    def list(
        self, *, kind: str | None = None, namespace: str | None = None, label_selector: str | None = None
    ) -> builtins.list[Obj]:
        return self._run(self._async.list(kind=kind, namespace=namespace, label_selector=label_selector))

    def delete(self, kind: str, name: str, namespace: str, *, propagation: str = "Foreground") -> bool:
        return self._run(self._async.delete(kind, name, namespace, propagation=propagation))

    def set_suspended(self, kind: str, name: str, namespace: str, suspended: bool) -> Obj:
        return self._run(self._async.set_suspended(kind, name, namespace, suspended))

    def resubmit(
        self,
        job: Obj,
        *,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        return self._run(self._async.resubmit(job, name=name, labels=labels, dry_run=dry_run))

    def annotate(self, kind: str, name: str, namespace: str, annotations: dict[str, str]) -> Obj:
        return self._run(self._async.annotate(kind, name, namespace, annotations))

    def prepare_attempt(
        self,
        request: lineage.Request,
        *,
        log: Callable[[str], None] = print,
        pod_wait: float = lineage.POD_WAIT_SECONDS,
        include: Sequence[Obj] = (),
    ) -> lineage.Prepared:
        """Reattach to, resume, or submit the attempt of ``request``'s lineage that should run now
        (``kubetrain.client.lineage``)."""
        return self._run(self._async.prepare_attempt(request, log=log, pod_wait=pod_wait, include=include))

    def watch(self, kind: str, name: str, namespace: str, *, timeout: float | None = None) -> Iterator[Obj]:
        return self._iterate(self._async.watch(kind, name, namespace, timeout=timeout))

    def wait(
        self,
        kind: str,
        name: str,
        namespace: str,
        *,
        timeout: float | None = None,
        on_change: Callable[[Obj], None] | None = None,
    ) -> Obj:
        return self._run(self._async.wait(kind, name, namespace, timeout=timeout, on_change=on_change))

    def check(self, job: Obj) -> Obj:
        return self._run(self._async.check(job))

    def logs(
        self,
        job: Obj,
        *,
        role: str | None = None,
        index: int = 0,
        container: str | None = None,
        tail: int | None = None,
        previous: bool = False,
        quiet: bool = False,
    ) -> str:
        return self._run(
            self._async.logs(
                job, role=role, index=index, container=container, tail=tail, previous=previous, quiet=quiet
            )
        )

    def follow_logs(
        self, job: Obj, *, role: str | None = None, index: int = 0, container: str | None = None
    ) -> Iterator[str]:
        return self._iterate(self._async.follow_logs(job, role=role, index=index, container=container))

    def pods(self, job: Obj) -> builtins.list[Any]:
        return self._run(self._async.pods(job))

    def disruption(self, namespace: str, pod: str) -> str | None:
        return self._run(self._async.disruption(namespace, pod))

    def pods_matching(self, namespace: str, label_selector: str) -> builtins.list[Any]:
        return self._run(self._async.pods_matching(namespace, label_selector))

    def pending_reasons(self, job: Obj) -> builtins.list[str]:
        return self._run(self._async.pending_reasons(job))

    def events(self, job: Obj) -> builtins.list[Any]:
        return self._run(self._async.events(job))

    report = staticmethod(AsyncJobClient.report)
