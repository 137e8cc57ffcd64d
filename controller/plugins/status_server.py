"""Give every trainer container the way to report progress: Kubeflow Trainer's status-server contract.

With the status server on (``--status-server-bind-address``), each container of a v1 job's pods
and of a TrainJob's trainer pods gets ``KUBEFLOW_TRAINER_SERVER_URL`` (the server's base URL and
the job's own path), ``KUBEFLOW_TRAINER_SERVER_TOKEN`` and ``KUBEFLOW_TRAINER_SERVER_CA_CERT``,
and the projected volume ``kubeflow-trainer-token`` they point into: a ServiceAccount token whose
audience is the job's path (valid 3600 s, renewed by the kubelet) and the server's CA from the
ConfigMap ``<job>-tls-config``, which the reconcilers create, owned by the job, before its pods.
A template that sets one of the variables itself keeps its value.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from kubetrain import naming
from kubetrain.api.kinds import job_kind
from kubetrain.api.objects import JobIdentity, Obj
from kubetrain.controller.state import JobView
from kubetrain.controller.statusserver.authz import status_path
from kubetrain.controller.v1.frameworks.base import env_value
from kubetrain.trainjob.state import TrainJobInfo


def tls_config_name(job_name: str) -> str:
    return f"{job_name}{naming.TRAINER_TLS_CONFIG_SUFFIX}"


@dataclass
class StatusServerPlugin:
    """``base_url``: how pods reach the server (``https://host:port``); ``ca``: the PEM they trust."""

    base_url: str
    ca: str
    name = "status-server"

    def tls_config(self, owner: JobIdentity) -> Obj:
        """The ConfigMap holding the CA, owned by the job."""
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": tls_config_name(owner.name),
                "namespace": owner.namespace,
                "ownerReferences": [owner.owner_reference()],
            },
            "data": {naming.TRAINER_CA_KEY: self.ca},
        }

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        if isinstance(info, TrainJobInfo):
            trainer = info.trainer()
            if trainer is None or trainer.name != rtype:
                return  # initializers and other pod sets do not train
            job = info.job
        elif isinstance(info, JobIdentity):
            job = info.job
        else:
            return
        path = status_path(job_kind(job["kind"]), info.namespace, info.name)
        directory = naming.TRAINER_TOKEN_DIR
        env = [
            env_value(naming.ENV_TRAINER_SERVER_URL, self.base_url.rstrip("/") + path),
            env_value(naming.ENV_TRAINER_SERVER_CA_CERT, posixpath.join(directory, naming.TRAINER_CA_KEY)),
            env_value(naming.ENV_TRAINER_SERVER_TOKEN, posixpath.join(directory, naming.TRAINER_TOKEN_KEY)),
        ]
        spec = pod["spec"]
        volumes = spec.setdefault("volumes", [])
        if not any(v.get("name") == naming.TRAINER_TOKEN_VOLUME for v in volumes):
            volumes.append(self._volume(path, info.name))
        for container in spec.get("containers") or []:
            names = {e.get("name") for e in container.get("env") or []}
            container.setdefault("env", []).extend(e for e in env if e["name"] not in names)
            mounts = container.setdefault("volumeMounts", [])
            if not any(m.get("mountPath") == directory for m in mounts):
                mounts.append({"name": naming.TRAINER_TOKEN_VOLUME, "mountPath": directory, "readOnly": True})

    @staticmethod
    def _volume(audience: str, job_name: str) -> Obj:
        return {
            "name": naming.TRAINER_TOKEN_VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": audience,
                            "expirationSeconds": naming.TRAINER_TOKEN_EXPIRY_SECONDS,
                            "path": naming.TRAINER_TOKEN_KEY,
                        }
                    },
                    {
                        "configMap": {
                            "name": tls_config_name(job_name),
                            "items": [{"key": naming.TRAINER_CA_KEY, "path": naming.TRAINER_CA_KEY}],
                        }
                    },
                ]
            },
        }
