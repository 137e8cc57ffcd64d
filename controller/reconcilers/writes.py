"""Writes every reconciler makes the same way: children in parallel, and the training report.

Shared by the v1 job and TrainJob reconcilers. Creates and deletes are tracked
by expectations (so a lagging cache never creates a pod twice) and summed up in
one Event per pass; the training report that rank 0 leaves as its termination
message is copied into the job's annotations.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubetrain import naming
from kubetrain.controller.core.events import NORMAL, WARNING, EventRecorder
from kubetrain.controller.core.expectations import Expectations
from kubetrain.controller.kube import errors
from kubetrain.controller.kube.client import KubeClient
from kubetrain.controller.kube.informer import Informer
from kubetrain.controller.kube.resources import PODS, Resource
from kubetrain.controller.runtimes.framework import Obj


@dataclass
class ChildWriter:
    kube: KubeClient
    expectations: Expectations
    recorder: EventRecorder
    concurrency: int = 64

    async def create_all(self, owner: Obj, resource: Resource, bodies: list[Obj], *, track: bool) -> None:
        """Create children in parallel; one Event names every child created (and one each failure)."""
        if not bodies:
            return
        meta = owner["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if track:
            self.expectations.expect_creations(key, len(bodies))
        limit = asyncio.Semaphore(self.concurrency)
        kind = resource.kind

        async def create(body: Obj) -> str | None:
            name: str = body["metadata"]["name"]
            async with limit:
                try:
                    await self.kube.create(resource, body, meta["namespace"])
                except errors.APIConflictError:
                    if track:
                        self.expectations.creation_observed(key)
                    return None
                except errors.APIError as exc:
                    if track:
                        self.expectations.creation_observed(key)
                    self.recorder.event(
                        owner, WARNING, f"FailedCreate{kind}", f"Error creating {name}: {exc.message}"
                    )
                    raise
            return name

        results = await asyncio.gather(*(create(b) for b in bodies), return_exceptions=True)
        created = [r for r in results if isinstance(r, str)]
        if created:
            noun = kind.lower() + ("s" if len(created) > 1 else "")
            self.recorder.event(
                owner, NORMAL, f"SuccessfulCreate{kind}", f"Created {noun}: {', '.join(created)}"
            )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]

    async def delete_all(self, owner: Obj, resource: Resource, objs: Iterable[Obj]) -> None:
        """Delete children in parallel (each guarded by its uid); one Event names every child deleted."""
        meta = owner["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        targets = list(objs)
        if not targets:
            return

        async def delete(obj: Obj) -> str | None:
            child = obj["metadata"]
            if resource is PODS:
                self.expectations.expect_deletion(key, child["uid"])
            gone = await self.kube.delete(resource, child["name"], meta["namespace"], uid=child["uid"])
            if not gone and resource is PODS:
                self.expectations.deletion_observed(key, child["uid"])
            return str(child["name"]) if gone else None

        deleted = [name for name in await asyncio.gather(*(delete(o) for o in targets)) if name]
        if deleted:
            noun = resource.kind.lower() + ("s" if len(deleted) > 1 else "")
            self.recorder.event(
                owner, NORMAL, f"SuccessfulDelete{resource.kind}", f"Deleted {noun}: {', '.join(deleted)}"
            )

    async def copy_report(
        self, resource: Resource, jobs: Informer, job: Obj, report: dict[str, Any] | None
    ) -> None:
        """Copy rank 0's training report into the job's annotations (and an Event) when it changes.

        ``job`` is the reconcile's private copy: its metadata is replaced by the written one, so the
        status write that follows carries the new resourceVersion.
        """
        if report is None:
            return
        text = json.dumps(report, sort_keys=True, separators=(",", ":"))
        meta = job["metadata"]
        if (meta.get("annotations") or {}).get(naming.ANNOTATION_TRAINING_REPORT) == text:
            return
        annotations = {naming.ANNOTATION_TRAINING_REPORT: text}
        checkpoint = report.get("last_checkpoint") or report.get("checkpoint")
        if checkpoint:
            annotations[naming.ANNOTATION_LAST_CHECKPOINT] = str(checkpoint)
        updated = await self.kube.patch(
            resource, meta["name"], {"metadata": {"annotations": annotations}}, namespace=meta["namespace"]
        )
        jobs.observe_write(updated)
        job["metadata"] = updated["metadata"]
        summary = ", ".join(f"{k}={v}" for k, v in sorted(report.items()) if k != "metrics")
        metrics_text = ", ".join(f"{k}={v}" for k, v in sorted((report.get("metrics") or {}).items()))
        self.recorder.event(
            job,
            NORMAL,
            "TrainingReport",
            f"rank 0 reported {summary}" + (f"; metrics: {metrics_text}" if metrics_text else ""),
        )
