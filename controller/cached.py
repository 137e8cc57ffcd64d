"""What the controller's caches keep of each object: only what the reconcilers read.

The informers hold every pod and service of every job, so at thousands of pods the cache is most of
the controller's memory, and most of each object is never read: ``managedFields`` (a few entries of
nested field sets per writer: the API server, the scheduler, the kubelet or kwok, this controller)
and the spec of a child (its containers, env, volumes and tolerations are what this controller wrote,
and no decision reads them back). Like client-go's informer transform, the cache keeps the rest:

* every object: its metadata but ``managedFields``;
* a pod: its metadata and status (phase, reason, conditions, start time, container states, restart
  counts and termination messages are what the decisions read) but the addresses, QoS class and
  container images and ids the kubelet reports (``UNREAD_POD_STATUS``, ``UNREAD_CONTAINER_STATUS``),
  and of its spec only ``nodeName`` (where the replica that failed first ran, ``controller.diagnosis``);
* a service: its metadata only (a job's services are found and deleted by owner and name);
* anything else (a job, a pod group, a runtime): all of it but ``managedFields``.

Each object is parsed from its own JSON document, so every pod holds its own copy of every key
(``lastTransitionTime``, ``ownerReferences``) and of every value its siblings share (``True``,
``Succeeded``, a job's name in its labels, the second it was created in): at thousands of pods these
copies are about half of what the cache holds. The cache keeps one copy of each such string, from a
table of its own (``sys.intern`` would do it too, but interned strings are immortal on some Python
versions, and an object's own uid and its resource versions never repeat); the table starts over
when it is full, so it stays bounded however many objects pass, and objects already cached keep
their strings. Resource versions stay out of it: every write brings a new one, and entering them
would fill the table with strings no object holds any more.

A write the reconciler makes is read back from the API server's answer, never from these copies, so
nothing stripped here is ever written back. Decisions that start reading another field of a child
must keep it here (tests/unit/controller/test_cached.py pins what is kept).
"""

from __future__ import annotations

from typing import Any

from kubetrain.api.objects import Obj

SHARED_STRINGS = 1 << 16  # the most strings the table holds before it starts over
SHARED_LENGTH = 64  # longer strings (messages, last-applied configurations) are rarely repeated
NEVER_REPEATED = frozenset({"resourceVersion"})  # a new value with every write: kept as it came
MANAGED_FIELDS = frozenset({"managedFields"})  # dropped from every cached object's metadata
UNREAD_POD_STATUS = frozenset(
    {"podIP", "podIPs", "hostIP", "hostIPs", "qosClass", "nominatedNodeName", "ephemeralContainerStatuses"}
)
UNREAD_CONTAINER_STATUS = frozenset(
    {
        "image",
        "imageID",
        "containerID",
        "volumeMounts",
        "allocatedResources",
        "allocatedResourcesStatus",
        "resources",
        "user",
    }
)
_shared: dict[str, str] = {}


def _one_copy(text: str) -> str:
    """The table's copy of ``text``, entered there when it is new."""
    kept = _shared.get(text)
    if kept is None:
        if len(_shared) >= SHARED_STRINGS:
            _shared.clear()
        kept = _shared[text] = text
    return kept


def _kept(obj: Obj, *, leaving: frozenset[str] = frozenset()) -> Obj:
    """``obj`` but its ``leaving`` keys, rebuilt with the table's copy of every key and short string."""
    return {
        _one_copy(k): v if k in NEVER_REPEATED else _compact(v) for k, v in obj.items() if k not in leaving
    }


def _compact(value: Any) -> Any:
    if isinstance(value, dict):
        return _kept(value)
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if isinstance(value, str) and len(value) <= SHARED_LENGTH:
        return _one_copy(value)
    return value


def _with_metadata(kept: Obj, obj: Obj) -> Obj:
    """``kept`` rebuilt, with ``obj``'s metadata but ``managedFields`` after it."""
    cached = _kept(kept)
    cached["metadata"] = _kept(obj.get("metadata") or {}, leaving=MANAGED_FIELDS)
    return cached


def stripped(obj: Obj) -> Obj:
    """An object as cached: all of it but ``managedFields``."""
    return _with_metadata({k: v for k, v in obj.items() if k != "metadata"}, obj)


def pod(obj: Obj) -> Obj:
    """A pod as cached: its identity, metadata, the status the decisions read and its node."""
    kept: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    if "status" in obj:
        kept["status"] = _pod_status(obj["status"])
    node = (obj.get("spec") or {}).get("nodeName")
    if node:
        kept["spec"] = {"nodeName": node}
    return _with_metadata(kept, obj)


def _pod_status(status: Obj) -> Obj:
    kept = {k: v for k, v in status.items() if k not in UNREAD_POD_STATUS}
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in kept:
            kept[key] = [{k: v for k, v in s.items() if k not in UNREAD_CONTAINER_STATUS} for s in kept[key]]
    return kept


def service(obj: Obj) -> Obj:
    """A service as cached: its identity and metadata."""
    return _with_metadata({k: obj[k] for k in ("apiVersion", "kind") if k in obj}, obj)
