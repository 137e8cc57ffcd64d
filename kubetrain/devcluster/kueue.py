"""Kueue on the local cluster (``kubetrain dev up --kueue``): its objects, configuration and webhooks.

Kueue runs as one more component process, like the scheduler. What a real install gets from
Kueue's manifests, this module derives from the same manifests in the Go module cache (the release
``build.py`` installs), changed only where a process on the loopback address differs from a pod
behind a Service:

* the webhooks call ``https://127.0.0.1:<port>/<path>`` (``clientConfig.url``) instead of the
  ``webhook-service``, and trust the cluster's own CA, which signed Kueue's serving certificate;
  Kueue's internal certificate management (which would write a Secret and patch the webhooks) is
  off;
* only the webhooks of the enabled integrations (the kinds kubetrain serves) and of Kueue's own
  kinds are registered: the manifest also carries ``failurePolicy: Fail`` webhooks for Pods,
  Deployments and StatefulSets, which would put Kueue on the path of every pod the cluster makes;
* with internal certificate management off, Kueue reads its metrics server's certificate from the
  fixed path ``/etc/kueue/metrics/certs`` (``cmd/kueue/main.go``; no flag or field moves it). So
  Kueue runs in a mount namespace of its own (``unshare``, inside a user namespace, so no privilege
  is needed) where an overlay on ``/etc`` adds that folder, holding a certificate of the cluster CA;
  the host's ``/etc`` is not touched; its on-demand visibility server (certificate at ``/visibility``,
  served through an APIService) is off;
* the JobSet CRD is installed because Kueue's TrainJob integration watches JobSets (its
  controller does not start without the kind); kubetrain creates none. Its release is the one
  Kueue's own ``go.mod`` requires, read from there.

The decisions (configuration, webhook rewrite) are pure functions; ``install`` applies them.
"""

from __future__ import annotations

import base64
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from kubetrain.api import kinds
from kubetrain.devcluster import build, paths
from kubetrain.devcluster.errors import DevClusterError

NAMESPACE = "kueue-system"
# Kueue names an integration ``<group>/<kind in lower case>``: those of the kinds kubetrain serves,
# with the resource each one admits.
INTEGRATIONS: dict[str, tuple[str, str]] = {
    f"{kind.group}/{kind.kind.lower()}": (kind.group, kind.plural) for kind in kinds.JOBS
}
KUEUE_GROUP = "kueue.x-k8s.io"
JOBSET_MODULE = "sigs.k8s.io/jobset"


def configuration(
    *,
    webhook_port: int,
    health_port: int,
    metrics_port: int,
    cert_dir: Path,
    pods_ready_timeout: float | None = None,
    worker_lost_timeout: float | None = None,
) -> dict[str, Any]:
    """Kueue's ``Configuration`` for the dev cluster: loopback ports, our certificate, no leader
    election (one replica), the kubetrain kinds' integrations; with ``pods_ready_timeout`` seconds,
    ``waitForPodsReady`` (a job whose pods are not all ready by then is evicted and requeued); with
    ``worker_lost_timeout`` seconds, MultiKueue's ``workerLostTimeout`` (how long a manager keeps a
    job admitted on a worker it lost the connection to before dispatching it again; Kueue's default
    is 15 minutes)."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(INTEGRATIONS)},
        # The on-demand visibility API server reads its certificate from /visibility (no flag moves
        # it) and would need an APIService; pending positions are read from Workloads instead.
        "featureGates": {"VisibilityOnDemand": False},
    }
    if pods_ready_timeout is not None:
        config["waitForPodsReady"] = {
            "timeout": f"{pods_ready_timeout:g}s",
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 1},
        }
    if worker_lost_timeout is not None:
        config["multiKueue"] = {"workerLostTimeout": f"{worker_lost_timeout:g}s"}
    return config


def _admits(webhook: dict[str, Any], kept: set[tuple[str, str]]) -> bool:
    return all(
        (group, resource) in kept or group == KUEUE_GROUP
        for rule in webhook.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
    )


def webhook_configurations(manifests: str, *, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from its ``manifests.yaml``, pointed at the loopback port and
    trusting ``ca_bundle``, keeping the webhooks of the enabled integrations and of Kueue's kinds."""
    kept = set(INTEGRATIONS.values())
    ca = base64.b64encode(ca_bundle).decode()
    result = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            if not _admits(hook, kept):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hooks.append({**hook, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}})
        result.append({**doc, "metadata": {"name": f"kueue-{doc['metadata']['name']}"}, "webhooks": hooks})
    return result


METRICS_CERTS = Path("/etc/kueue/metrics/certs")
_WITH_ETC_OVERLAY = (
    'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$0,workdir=$1" /etc && shift && exec "$@"'
)


def in_private_etc(argv: list[str], *, upper: Path, work: Path) -> list[str]:
    """``argv`` run where ``/etc`` is the host's with ``upper`` laid over it (in a user and mount
    namespace of its own; ``work`` is the overlay's scratch folder, on the same filesystem)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise DevClusterError("`unshare` (util-linux) is not on PATH; install util-linux to run --kueue")
    return [
        unshare,
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        _WITH_ETC_OVERLAY,
        str(upper),
        str(work),
        *argv,
    ]


def required_version(go_mod: str, module: str) -> str:
    """The version of ``module`` a ``go.mod`` requires."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.MULTILINE)
    if match is None:
        raise DevClusterError(f"{module} is not required by the Kueue module's go.mod")
    return match[1]


def crd_files(kueue_source: Path, jobset_source: Path) -> list[Path]:
    """Kueue's CRDs and JobSet's, as their releases ship them."""
    kueue_crds = sorted((kueue_source / "config" / "components" / "crd" / "bases").glob("*.yaml"))
    jobset_crds = sorted((jobset_source / "config" / "components" / "crd" / "bases").glob("*.yaml"))
    if not kueue_crds or not jobset_crds:
        raise DevClusterError(
            f"no CRDs under {kueue_source} or {jobset_source}; clear the Go module cache entry and retry"
        )
    return [*kueue_crds, *jobset_crds]


def _write_all(path: Path, objects: Iterable[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    return path


def install(*, kubectl: Callable[..., str], workdir: Path, webhook_port: int, ca_bundle: bytes) -> None:
    """Install what Kueue needs before its manager starts, with ``kubectl`` (the cluster's): kubetrain's
    CRDs (so Kueue's integrations find their kinds at start, not after a backoff of up to two minutes),
    Kueue's and JobSet's CRDs, its namespace and webhooks."""
    source = build.kueue_source()
    jobset = build.module_source(
        JOBSET_MODULE, required_version((source / "go.mod").read_text(), JOBSET_MODULE)
    )
    files = [*sorted(paths.CRDS.glob("*.yaml")), *crd_files(source, jobset)]
    file_args = [arg for file in files for arg in ("-f", str(file))]
    kubectl("apply", "--server-side", *file_args)
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *file_args)
    manifests = (source / "config" / "components" / "webhook" / "manifests.yaml").read_text()
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *webhook_configurations(manifests, port=webhook_port, ca_bundle=ca_bundle),
    ]
    kubectl("apply", "--server-side", "-f", str(_write_all(workdir / "objects.yaml", objects)))
