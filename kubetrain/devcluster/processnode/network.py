"""Pod IPs and cluster DNS names on the process node, without a network of its own.

Every pod on the process node gets an address of its own in 127.0.0.0/8 (all
of which is loopback on Linux, no setup needed). There is no cluster DNS, so
the names a training job uses to find its peers (``MASTER_ADDR=mnist-master-0``,
``mnist-worker-0.ns.svc:2222`` in TF_CONFIG, ``job-node-0-0.job`` for a TrainJob)
are resolved by the process node itself and written into the container's env
and arguments as that address. Every form cluster DNS answers is understood:

* ``<service>``, ``<service>.<ns>``, ``<service>.<ns>.svc``, ``<service>.<ns>.svc.cluster.local``
  (a Service's selector picks the backing pod);
* ``<hostname>.<subdomain>`` and the same followed by ``.<ns>``, ``.<ns>.svc`` and
  ``.<ns>.svc.cluster.local`` (pods with ``spec.hostname`` and ``spec.subdomain``).

Volume mounts work the same way: a container path under a mount (``/ckpt``) is
rewritten to the host directory behind it, and back again in what the process
reports, so the job only ever sees container paths.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any

Obj = dict[str, Any]
CLUSTER_DOMAIN = "cluster.local"
# A DNS name standing on its own: not part of a path, a file name or a longer word.
_NAME = re.compile(
    r"(?<![\w./-])[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*(?![\w/-])"
)


class AddressPool:
    """Hands out loopback addresses 127.1.x.y, one per pod uid, and takes them back."""

    def __init__(self, network: str = "127.1.0.0/16") -> None:
        self._hosts = ipaddress.ip_network(network).hosts()
        self._free: list[str] = []
        self._by_uid: dict[str, str] = {}

    def acquire(self, uid: str) -> str:
        if uid not in self._by_uid:
            self._by_uid[uid] = self._free.pop() if self._free else str(next(self._hosts))
        return self._by_uid[uid]

    def release(self, uid: str) -> None:
        address = self._by_uid.pop(uid, None)
        if address is not None:
            self._free.append(address)

    def get(self, uid: str) -> str | None:
        return self._by_uid.get(uid)


def _selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Resolver:
    """Cluster DNS for the process node, over the pods it runs and the cluster's services."""

    def __init__(
        self,
        pods: Callable[[], Iterable[Obj]],
        services: Callable[[], Iterable[Obj]],
        address_of: Callable[[Obj], str | None],
    ) -> None:
        self._pods = pods
        self._services = services
        self._address_of = address_of

    def resolve(self, name: str, namespace: str) -> str | None:
        """The address behind a DNS name as seen from a pod in ``namespace``, or None."""
        parts = name.split(".")
        suffixes: tuple[list[str], ...] = (
            [],
            [namespace],
            [namespace, "svc"],
            [namespace, "svc", *CLUSTER_DOMAIN.split(".")],
        )
        for tail in suffixes:
            if tail and (len(parts) <= len(tail) or parts[-len(tail) :] != tail):
                continue
            head = parts[: len(parts) - len(tail)] if tail else parts
            if len(head) == 1:
                address = self._service(head[0], namespace)
            elif len(head) == 2:
                address = self._pod_by_hostname(head[0], head[1], namespace)
            else:
                address = None
            if address is not None:
                return address
        # "<service>.<other namespace>" forms name their own namespace.
        if len(parts) >= 2 and parts[2:] in ([], ["svc"], ["svc", *CLUSTER_DOMAIN.split(".")]):
            return self._service(parts[0], parts[1])
        return None

    def _service(self, name: str, namespace: str) -> str | None:
        for service in self._services():
            meta = service["metadata"]
            if meta["name"] != name or meta.get("namespace") != namespace:
                continue
            selector = (service.get("spec") or {}).get("selector") or {}
            for pod in self._pods():
                if pod["metadata"].get("namespace") == namespace and _selector_matches(
                    selector, pod["metadata"].get("labels") or {}
                ):
                    address = self._address_of(pod)
                    if address:
                        return address
        return None

    def _pod_by_hostname(self, hostname: str, subdomain: str, namespace: str) -> str | None:
        for pod in self._pods():
            spec = pod.get("spec") or {}
            if (
                pod["metadata"].get("namespace") == namespace
                and spec.get("hostname") == hostname
                and spec.get("subdomain") == subdomain
            ):
                return self._address_of(pod)
        return None

    def rewrite(self, text: str, namespace: str) -> tuple[str, list[str]]:
        """``text`` with every resolvable cluster name replaced; also the names that were resolved."""
        found: list[str] = []

        def replace(match: re.Match[str]) -> str:
            address = self.resolve(match[0], namespace)
            if address is None:
                return match[0]
            found.append(match[0])
            return address

        return _NAME.sub(replace, text), found

    def waiting_for(self, text: str, namespace: str, jobs: Iterable[str] = ()) -> list[str]:
        """Names in ``text`` that DNS would not answer yet, but will: services that exist with no pod
        here yet, and the peers of the pod's own training job (``jobs``), whose services may not
        have reached this node's cache yet."""
        services = {
            s["metadata"]["name"] for s in self._services() if s["metadata"].get("namespace") == namespace
        }
        peers = [re.compile(rf"^{re.escape(job)}-[a-z0-9-]*-\d+$") for job in jobs]
        pending = []
        for match in _NAME.finditer(text):
            labels = match[0].split(".")
            candidates = {labels[0], *labels[1:2]}  # "<svc>..." or "<host>.<subdomain-service>..."
            peer = any(p.match(labels[0]) for p in peers)
            if (candidates & services or peer) and self.resolve(match[0], namespace) is None:
                pending.append(match[0])
        return pending


def map_paths(text: str, mounts: list[tuple[str, str]]) -> str:
    """Rewrite container paths under a mount point to host paths (longest mount point first)."""
    for container_path, host_path in sorted(mounts, key=lambda m: -len(m[0])):
        prefix = container_path.rstrip("/")
        text = re.sub(rf"(?<![\w/]){re.escape(prefix)}(?=/|$|[\s:,\"'])", host_path.rstrip("/"), text)
    return text


def unmap_paths(text: str, mounts: list[tuple[str, str]]) -> str:
    """The reverse of ``map_paths``: host paths back to the container paths users wrote."""
    for container_path, host_path in sorted(mounts, key=lambda m: -len(m[1])):
        text = text.replace(host_path.rstrip("/"), container_path.rstrip("/"))
    return text
