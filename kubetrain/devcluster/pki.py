"""Keys, certificates, tokens and kubeconfigs for one local cluster.

A small CA of our own signs the API server's serving certificate (so clients
verify TLS instead of skipping it) and the client certificate the API server
presents to node endpoints (``kubectl logs`` on the process node). etcd has a CA
of its own, whose key is thrown away once it has signed etcd's certificate and
the API server's client certificate: etcd serves TLS only and takes only clients
with that certificate, so nothing else on the machine reads or writes the
cluster's objects behind the API server's back. People and
components authenticate with static bearer tokens, one identity each, so RBAC
decisions in the logs name who did what. Everything is generated fresh per
cluster and lives in its state dir; the keys and certificates themselves are
made by ``certs``, whose ``generate`` writes all of it (this module imports no
``cryptography``: every ``kubetrain`` command reads it).
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubetrain import naming


@dataclass(frozen=True)
class Identity:
    """A static-token identity: the user name and groups the API server sees."""

    name: str
    user: str
    groups: tuple[str, ...] = ()


IDENTITIES: tuple[Identity, ...] = (
    Identity("admin", "kubetrain-admin", ("system:masters",)),
    Identity("scheduler", "system:kube-scheduler"),
    Identity("controller-manager", "system:kube-controller-manager"),
    Identity("kwok", "kubetrain:kwok", ("system:masters",)),
    Identity("process-node", f"system:node:{naming.PROCESS_NODE}", ("system:nodes",)),
    Identity("provisioner", "kubetrain:local-provisioner", ("system:masters",)),
    Identity("kueue", "kubetrain:kueue", ("system:masters",)),
)


class _InRoot:
    """A file of the PKI: its root joined with ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, pki: Pki, owner: type[Pki] | None = None) -> Path:
        return pki.root / self.name


@dataclass(frozen=True)
class Pki:
    """Paths of everything generated for one cluster."""

    root: Path

    ca_cert = _InRoot("ca.crt")
    ca_key = _InRoot("ca.key")
    serving_cert = _InRoot("apiserver.crt")
    serving_key = _InRoot("apiserver.key")
    kubelet_client_cert = _InRoot("apiserver-kubelet-client.crt")
    kubelet_client_key = _InRoot("apiserver-kubelet-client.key")
    sa_key = _InRoot("sa.key")
    sa_pub = _InRoot("sa.pub")
    tokens = _InRoot("tokens.csv")
    etcd_ca_cert = _InRoot("etcd-ca.crt")
    etcd_cert = _InRoot("etcd.crt")  # serving, and presented to its peer port
    etcd_key = _InRoot("etcd.key")
    etcd_client_cert = _InRoot("apiserver-etcd-client.crt")  # the only client etcd takes
    etcd_client_key = _InRoot("apiserver-etcd-client.key")

    def token(self, identity: str) -> str:
        """The bearer token of an identity (the third column, uid, holds its short name)."""
        for line in self.tokens.read_text().splitlines():
            token, _user, uid, *_ = line.split(",")
            if uid == identity:
                return token
        raise KeyError(identity)


def write_tokens(pki: Pki) -> None:
    """A fresh bearer token for each identity, in the API server's static token file (owner only)."""
    rows = []
    for identity in IDENTITIES:
        groups = f',"{",".join(identity.groups)}"' if identity.groups else ""
        rows.append(f"{secrets.token_hex(24)},{identity.user},{identity.name}{groups}")
    pki.tokens.write_text("\n".join(rows) + "\n")
    pki.tokens.chmod(0o600)


def kubeconfig(*, server: str, ca_cert: Path, token: str, user: str, context: str = "kubetrain-dev") -> str:
    """A kubeconfig for one identity; the CA is embedded so the file can be copied anywhere."""
    ca_data = base64.b64encode(ca_cert.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    return yaml.safe_dump(config, sort_keys=False)
