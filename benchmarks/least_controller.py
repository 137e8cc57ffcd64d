"""The least a controller can do for a PyTorchJob, as a peer for the throughput benchmark.

The bare creators of ``controller_throughput.py`` write each job's children in the same breath as
the job, so they pay no controller's round trip: the job's watch event reaching a controller, and the
children's creates that follow it. Any operator pays that, whatever its language or its logic. This
process pays only that: it watches the jobs of one namespace and, for each new one, creates the
same pods and services kubetrain's controller would (no status until the Master succeeds, no Events,
no restarts, no deletes, no work queue). Its p95 create latency against the bare creator's is the
floor the controller pattern itself sets on a machine, in this language and client; kubetrain's
against it is what kubetrain's own logic costs.

It reports its API requests and its "passes" (one a job it acts on) through the Kubernetes runtime's
observer, as the controller's Prometheus series (``kubetrain_kube_api_requests_total``,
``kubetrain_reconcile_total``), so the benchmark reads it as it reads the controller.

Usage: python benchmarks/least_controller.py NAMESPACE METRICS_PORT (KUBECONFIG from the environment)
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from typing import Any

from prometheus_client import start_http_server

from kubetrain import naming
from kubetrain.api.kinds import PYTORCHJOB
from kubetrain.controller import metrics
from kubetrain.controller.core.children import build_pod, build_service
from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.plugins.gpu import GpuPlugin
from kubetrain.controller.state import PodPlugin
from kubetrain.controller.v1.frameworks import by_name
from kubetrain.controller.v1.frameworks.base import job_info
from kubetrain.kube import observer
from kubetrain.kube.client import KubeClient
from kubetrain.kube.informer import Informer
from kubetrain.kube.resources import PODS, SERVICES, Resource

STARTED = "least controller started"
NAME = "least-controller"


PLUGINS: list[PodPlugin] = [CheckpointPlugin(), GpuPlugin()]  # what the controller applies


def children(job: dict[str, Any]) -> list[tuple[Resource, dict[str, Any]]]:
    """The pods and services kubetrain's controller creates for a PyTorchJob, a pod and a service a
    replica, built as it builds them (the bare creators write the same)."""
    info = job_info(job, by_name("PyTorchJob"))
    built: list[tuple[Resource, dict[str, Any]]] = []
    for rtype, replica in info.replicas.items():
        for index in range(replica.replicas):
            built += [
                (PODS, build_pod(info, rtype, index, PLUGINS)),
                (SERVICES, build_service(info, rtype, index)),
            ]
    return built


class LeastController:
    """Creates each new job's children once, and marks the job Succeeded when its Master succeeds."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.jobs = Informer(kube, PYTORCHJOB.resource, namespace=namespace)
        self.pods = Informer(kube, PODS, namespace=namespace)
        self.jobs.add_handler(self._job_seen)
        self.pods.add_handler(self._pod_seen)
        self.done: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _job_seen(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if old is None and new is not None:
            self._spawn(self._create_children(new))

    def _pod_seen(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None or (new.get("status") or {}).get("phase") != "Succeeded":
            return
        labels = new["metadata"].get("labels") or {}
        job = labels.get(naming.LABEL_JOB_NAME)
        if labels.get(naming.LABEL_REPLICA_TYPE) == "master" and job and job not in self.done:
            self.done.add(job)
            self._spawn(self._succeed(job))

    async def _create_children(self, job: dict[str, Any]) -> None:
        observer.current().reconcile_started(NAME)
        await asyncio.gather(*(self.kube.create(r, body, self.namespace) for r, body in children(job)))
        observer.current().reconciled(NAME, "success", 0.0)

    async def _succeed(self, job: str) -> None:
        condition = {"type": "Succeeded", "status": "True", "reason": "MasterSucceeded"}
        await self.kube.patch(
            PYTORCHJOB.resource,
            job,
            {"status": {"conditions": [condition]}},
            namespace=self.namespace,
            subresource="status",
        )


async def main(namespace: str, port: int) -> None:
    metrics.install()
    start_http_server(port, addr="127.0.0.1", registry=metrics.REGISTRY)
    kube = await KubeClient.from_kubeconfig(os.environ.get("KUBECONFIG"))
    controller = LeastController(kube, namespace)
    for informer in (controller.jobs, controller.pods):
        informer.start()
        await informer.wait_synced()
    print(STARTED, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
