"""What the controller's caches keep of each object: only what the reconcilers read.

The informers hold every pod and service of every job, so at thousands of pods the cache is most of
the controller's memory, and most of each object is never read: ``managedFields`` (a few entries of
nested field sets per writer: the API server, the scheduler, the kubelet or kwok, this controller)
and the spec of a child (its containers, env, volumes and tolerations are what this controller wrote,
and no decision reads them back). Like client-go's informer transform, the cache keeps the rest:

* every object: its metadata but ``managedFields``;
* a pod: its metadata and status (phase, reason, conditions, container states, restart counts and
  termination messages are what the decisions read), and of its spec only ``nodeName`` (where the
  replica that failed first ran, ``controller.diagnosis``);
* a service: its metadata only (a job's services are found and deleted by owner and name);
* anything else (a job, a pod group, a runtime): all of it but ``managedFields``.

A write the reconciler makes is read back from the API server's answer, never from these copies, so
nothing stripped here is ever written back. Decisions that start reading another field of a child
must keep it here (tests/unit/controller/test_cached.py pins what is kept).
"""

from __future__ import annotations

from kubetrain.controller.state import Obj


def _metadata(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return meta
    return {k: v for k, v in meta.items() if k != "managedFields"}


def stripped(obj: Obj) -> Obj:
    """An object as cached: all of it but ``managedFields``."""
    return {**obj, "metadata": _metadata(obj)}


def pod(obj: Obj) -> Obj:
    """A pod as cached: its identity, metadata, status and node."""
    kept: Obj = {k: obj[k] for k in ("apiVersion", "kind", "status") if k in obj}
    node = (obj.get("spec") or {}).get("nodeName")
    if node:
        kept["spec"] = {"nodeName": node}
    return {**kept, "metadata": _metadata(obj)}


def service(obj: Obj) -> Obj:
    """A service as cached: its identity and metadata."""
    kept: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    return {**kept, "metadata": _metadata(obj)}
