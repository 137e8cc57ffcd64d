"""Informer handlers shared by the reconcilers: turn a change into the key of the job to reconcile.

A job's own events enqueue the job; a child's (pod, service, pod group, runtime
snapshot) enqueue the job of the owner kind that controls it, found through its
controller owner reference. Which informers settle expectations is decided where
the handlers are registered: the factory is told, it does not guess from the object.
"""

from __future__ import annotations

from collections.abc import Callable

from kubetrain.api.objects import Obj
from kubetrain.controller.core.departed import DepartedPods
from kubetrain.kube.expectations import Expectations
from kubetrain.kube.informer import Handler
from kubetrain.kube.resources import Resource


def owner_key(obj: Obj, owner: Resource) -> str | None:
    """The key of the job of kind ``owner`` that controls ``obj``, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == owner.kind
            and ref.get("apiVersion", "").startswith(owner.group + "/")
        ):
            return f"{obj['metadata']['namespace']}/{ref['name']}"
    return None


def child_handler(
    owner: Resource,
    enqueue: Callable[[str], None],
    expectations: Expectations | None = None,
    departed: DepartedPods | None = None,
) -> Handler:
    """Enqueue the job that controls the child; with ``expectations``, also settle the job's
    expected creates and deletes (for the children whose writes the reconciler tracks); with
    ``departed``, keep the training report a deleted child carried."""

    def handle(old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = owner_key(obj, owner)
        if key is None:
            return
        if expectations is not None:
            if old is None:
                expectations.creation_observed(key)
            elif new is None:
                expectations.deletion_observed(key, obj["metadata"].get("uid", ""))
        if departed is not None and new is None:
            departed.keep(key, obj)
        enqueue(key)

    return handle


def job_handler(
    enqueue: Callable[[str], None],
    expectations: Expectations,
    on_delete: Callable[[str], object] | None = None,
) -> Handler:
    """Enqueue the job; once it is gone, forget its expectations (and whatever ``on_delete`` drops)."""

    def handle(old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if new is None:
            expectations.forget(key)
            if on_delete is not None:
                on_delete(key)
        enqueue(key)

    return handle
