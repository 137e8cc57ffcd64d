"""Keep a job's ``<job>-tls-config`` ConfigMap on the status server's current CA (before its pods).

Its pods' projected volume reads the CA from there; a controller that made a new CA since (a
restart without ``--status-server-cert-dir``) updates it, and new pods trust the new server.
"""

from __future__ import annotations

from kubetrain.api.objects import JobIdentity, Obj
from kubetrain.controller.core.writes import check_existing, require_ours
from kubetrain.controller.plugins.status_server import StatusServerPlugin
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import CONFIGMAPS


async def sync_tls_config(kube: KubeClient, job: Obj, plugin: StatusServerPlugin) -> None:
    """Create the job's CA ConfigMap, or bring its data up to date; one held by another owner fails."""
    desired = plugin.tls_config(JobIdentity(job))
    name, namespace = desired["metadata"]["name"], desired["metadata"]["namespace"]
    existing = await kube.get(CONFIGMAPS, name, namespace)
    if existing is None:
        try:
            await kube.create(CONFIGMAPS, desired, namespace)
            return
        except errors.APIConflictError:
            existing = await check_existing(kube, job, CONFIGMAPS, name)
    else:
        require_ours(job, CONFIGMAPS, existing)
    if existing is not None and (existing.get("data") or {}) != desired["data"]:
        await kube.patch(CONFIGMAPS, name, {"data": desired["data"]}, namespace=namespace)
