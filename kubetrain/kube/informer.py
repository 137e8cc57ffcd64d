"""List+watch caches: the controller's read path.

An informer lists a resource once, then watches from the list's
resourceVersion, applying each event to an in-memory store of raw dicts and
telling its handlers. It asks for bookmarks, so a quiet watch still moves its
resourceVersion forward and a restarted watch does not replay history.

Three ways a watch ends, three answers:

* the server closes it (``timeoutSeconds``): watch again from the last
  resourceVersion;
* 410 Gone (the version was compacted away): list again, diff against the
  store (so deletions missed while away are noticed) and watch from there;
* silence: a watch that has delivered neither events nor bookmarks for
  ``stall_timeout`` is presumed stuck (a half-open connection, a request that
  never got its answer) and is cancelled by a watchdog, then started again from
  the last resourceVersion: nothing was missed, so no re-list is needed. The API
  server sends a bookmark about every minute even on a quiet watch, so the
  default of 90 seconds never cuts a healthy one, while a stuck one costs a
  minute and a half instead of the ten it did.

The controller's own writes enter the store at once (``observe_write``), so the
store can be ahead of the watch. An event older than the copy the store holds
(the watch still delivering what happened before that write) is dropped: applied,
it would step the cache back to before the write, and a reconcile would act on
the past, such as recreating the pods of a job whose terminal status it had just
written and whose pods it had just deleted.

Indexes (by owner uid, for instance) are kept up to date on every change, so a
reconciler finds a job's pods without scanning every pod. A ``transform``, as
client-go's informers have, decides what of each object the store keeps (what
its readers never read costs memory per object, at thousands of objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Unpack

from kubetrain.kube import errors, observer
from kubetrain.kube.client import KubeClient, Obj, Selection
from kubetrain.kube.resources import Resource

log = logging.getLogger(__name__)

IndexFunc = Callable[[Obj], Iterable[str]]
STALL_TIMEOUT = 90.0  # seconds of silence after which a watch is presumed stuck


Transform = Callable[[Obj], Obj]  # what the store keeps of an object the API server sent

# Told about every change the store sees: (old, new); ``old`` is None on add, ``new`` is None on delete.
Handler = Callable[[Obj | None, Obj | None], None]


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def controller_owner_uid(obj: Obj) -> list[str]:
    """Index function: the uid of the object's controller owner, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return [str(ref["uid"])]
    return []


def _later(obj: Obj, than: Obj) -> bool:
    """Whether ``obj`` is a later version than ``than`` (the copy of it the store holds).

    ResourceVersions are the API server's storage revisions, numbers that grow with every write; one
    that is not a number is taken as later unless it is the same string (a duplicate).
    """
    mine = obj.get("metadata", {}).get("resourceVersion")
    theirs = than.get("metadata", {}).get("resourceVersion")
    if mine == theirs:
        return False
    try:
        return int(mine) > int(theirs)
    except (TypeError, ValueError):
        return True


class Informer:
    """A list+watch cache of one resource, or of the objects of it that ``selection`` names."""

    def __init__(
        self,
        kube: KubeClient,
        resource: Resource,
        *,
        watch_timeout: int = 300,
        stall_timeout: float | None = None,
        indexes: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
        **selection: Unpack[Selection],
    ) -> None:
        self.kube = kube
        self.resource = resource
        self._selection = selection  # the list and every watch ask for the same, or the cache would drift
        self.watch_timeout = watch_timeout
        self.stall_timeout = (
            stall_timeout if stall_timeout is not None else min(STALL_TIMEOUT, 2.0 * watch_timeout)
        )
        self._store: dict[str, Obj] = {}
        self._transform = transform
        self._index_funcs = dict(indexes or {})
        self._indexes: dict[str, defaultdict[str, set[str]]] = {
            name: defaultdict(set) for name in self._index_funcs
        }
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._last_activity = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    # -- reading -------------------------------------------------------------------------------
    def get(self, key: str) -> Obj | None:
        return self._store.get(key)

    def objects(self) -> list[Obj]:
        return list(self._store.values())

    def by_index(self, index: str, value: str) -> list[Obj]:
        return [self._store[key] for key in self._indexes[index].get(value, ()) if key in self._store]

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def observe_write(self, obj: Obj) -> None:
        """Put the API server's answer to our own write into the cache at once.

        The watch will deliver the same version a moment later (and be ignored as a
        duplicate); meanwhile the next reconcile of the same key reads what it wrote,
        not the copy before it, which would otherwise cause a needless conflict.
        """
        current = self._store.get(object_key(obj))
        if current is not None:
            self._apply("MODIFIED", obj)  # ``_keep`` drops it if the watch has already moved past it

    # -- running -------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self.run(), name=f"informer:{self.resource}")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run(self) -> None:
        """List, then watch forever; re-list on 410 or a stalled watch; back off on errors."""
        need_list = True
        failures = 0
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                await self._watch_with_watchdog()
                failures = 0
            except errors.APIGoneError:
                observer.current().watch_restarted(str(self.resource), "gone")
                need_list = True
            except TimeoutError:
                log.warning(
                    "watch of %s was silent for %.0fs; watching again", self.resource, self.stall_timeout
                )
                observer.current().watch_restarted(str(self.resource), "stalled")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = min(0.5 * 2 ** min(failures, 6), 30.0)
                log.warning("watch of %s failed (%s); retrying in %.1fs", self.resource, exc, delay)
                observer.current().watch_restarted(str(self.resource), "error")
                need_list = need_list or isinstance(exc, errors.APIError)
                await asyncio.sleep(delay)

    async def _relist(self) -> None:
        items, version = await self.kube.list(self.resource, transform=self._transform, **self._selection)
        fresh = {object_key(item): item for item in items}
        for key in list(self._store):
            if key not in fresh:
                self._keep("DELETED", self._store[key])
        for item in items:
            self._keep("MODIFIED" if object_key(item) in self._store else "ADDED", item)
        self._resource_version = version
        self._last_activity = time.monotonic()
        self._synced.set()

    async def _watch_with_watchdog(self) -> None:
        watch = asyncio.create_task(self._watch_once())
        try:
            while True:
                remaining = self.stall_timeout - (time.monotonic() - self._last_activity)
                done, _ = await asyncio.wait({watch}, timeout=max(remaining, 0.01))
                if done:
                    watch.result()
                    return
                if time.monotonic() - self._last_activity >= self.stall_timeout:
                    raise TimeoutError
        finally:
            if not watch.done():
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watch

    async def _watch_once(self) -> None:
        self._last_activity = time.monotonic()
        async for event in self.kube.watch(
            self.resource,
            resource_version=self._resource_version,
            timeout_seconds=self.watch_timeout,
            **self._selection,
        ):
            self._last_activity = time.monotonic()
            kind = event.get("type")
            obj = event.get("object") or {}
            version = obj.get("metadata", {}).get("resourceVersion")
            if kind == "BOOKMARK":
                if version:
                    self._resource_version = version
                continue
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
                if version:
                    self._resource_version = version

    # -- the store -----------------------------------------------------------------------------
    def _apply(self, kind: str, obj: Obj) -> None:
        """An event on ``obj`` as the API server sent it."""
        self._keep(kind, self._transform(obj) if self._transform is not None else obj)

    def _keep(self, kind: str, obj: Obj) -> None:
        """An event on ``obj`` as cached (transformed)."""
        key = object_key(obj)
        old = self._store.get(key)
        if kind == "DELETED":
            if old is None:
                return
            del self._store[key]
            self._unindex(key, old)
            new: Obj | None = None
        else:
            if old is not None and not _later(obj, old):
                return
            if old is not None:
                self._unindex(key, old)
            self._store[key] = obj
            self._index(key, obj)
            new = obj
        observer.current().cached(str(self.resource), len(self._store))
        for handler in self._handlers:
            try:
                handler(old, new)
            except Exception:
                log.exception("handler for %s failed on %s", self.resource, key)

    def _index(self, key: str, obj: Obj) -> None:
        for name, func in self._index_funcs.items():
            for value in func(obj):
                self._indexes[name][value].add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, func in self._index_funcs.items():
            for value in func(obj):
                bucket = self._indexes[name].get(value)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self._indexes[name][value]
