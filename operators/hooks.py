"""Cluster credentials from an Airflow ``kubernetes`` connection, in a form a trigger can carry.

Users configure one connection of the cncf.kubernetes provider's ``kubernetes``
type (in-cluster, a kubeconfig path, an inline kubeconfig, a context) for all
their Kubernetes tasks; this hook reads it with that provider's own hook and
turns it into a ``ClusterConnection``: plain data, resolved on the worker and
handed to the trigger, because the triggerer may have neither the same files
nor the same connections.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

from kubetrain.client import AsyncJobClient, JobClient


@dataclass(frozen=True)
class ClusterConnection:
    """How to reach the cluster: serialisable, so it travels to the triggerer."""

    in_cluster: bool = False
    config_dict: dict[str, Any] | None = None
    config_file: str | None = None
    context: str | None = None
    namespace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterConnection:
        return cls(**data)

    def key(self) -> str:
        """Identity of the cluster, to share one watch among tasks that use the same connection."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def _kwargs(self) -> dict[str, Any]:
        if self.in_cluster:
            return {"in_cluster": True}
        if self.config_dict is not None:
            return {"config_dict": self.config_dict, "context": self.context, "in_cluster": False}
        return {"kubeconfig": self.config_file, "context": self.context, "in_cluster": False}

    def client(self) -> JobClient:
        return JobClient.connect(**self._kwargs())

    async def aclient(self) -> AsyncJobClient:
        return await AsyncJobClient.connect(**self._kwargs())


class KubetrainHook(KubernetesHook):
    """The cncf.kubernetes hook, reading its connection into a ``ClusterConnection``."""

    hook_name = "Kubernetes Cluster Connection (kubetrain)"

    def cluster_connection(self) -> ClusterConnection:
        in_cluster = self._setting("in_cluster", self.in_cluster)
        path = self._setting("kube_config_path", self.config_file)
        inline = self._setting("kube_config")
        context = self._setting("cluster_context", self.cluster_context)
        namespace = self._setting("namespace")
        if sum(1 for option in (in_cluster, path, inline, self.config_dict) if option) > 1:
            raise ValueError(
                f"connection {self.conn_id!r}: set only one of in_cluster, kube_config_path and kube_config"
            )
        if in_cluster:
            return ClusterConnection(in_cluster=True, namespace=namespace)
        if inline or self.config_dict:
            data = self.config_dict or (yaml.safe_load(inline) if isinstance(inline, str) else inline)
            return ClusterConnection(config_dict=data, context=context, namespace=namespace)
        return ClusterConnection(config_file=path, context=context, namespace=namespace)

    def _setting(self, field: str, given: Any = None) -> Any:
        """``given`` (the hook's own argument) unless None, else the connection's ``field``."""
        return self._coalesce_param(given, self._get_field(field))  # type: ignore[no-untyped-call]
