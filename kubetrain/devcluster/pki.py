"""Keys, certificates, tokens and kubeconfigs for one local cluster.

A small CA of our own signs the API server's serving certificate (so clients
verify TLS instead of skipping it) and the client certificate the API server
presents to node endpoints (``kubectl logs`` on the process node). People and
components authenticate with static bearer tokens, one identity each, so RBAC
decisions in the logs name who did what. Everything is generated fresh per
cluster and lives in its state dir.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _cert(
    *,
    subject: str,
    key: rsa.RSAPrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: rsa.RSAPrivateKey,
    ca: bool = False,
    server: bool = False,
    client: bool = False,
    organization: str | None = None,
) -> x509.Certificate:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, subject)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    name = x509.Name(attrs)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.DNSName("kubernetes.default.svc.cluster.local"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                ]
            ),
            critical=False,
        )
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


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

    def token(self, identity: str) -> str:
        """The bearer token of an identity (the third column, uid, holds its short name)."""
        for line in self.tokens.read_text().splitlines():
            token, _user, uid, *_ = line.split(",")
            if uid == identity:
                return token
        raise KeyError(identity)


def generate(root: Path) -> Pki:
    """Create a CA, serving and client certificates, service-account keys and tokens under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    pki = Pki(root)
    ca_key = _key()
    ca = _cert(subject="kubetrain-dev-ca", key=ca_key, issuer=None, issuer_key=ca_key, ca=True)
    _write_key(ca_key, pki.ca_key)
    _write_cert(ca, pki.ca_cert)

    serving_key = _key()
    _write_key(serving_key, pki.serving_key)
    _write_cert(
        _cert(subject="kube-apiserver", key=serving_key, issuer=ca, issuer_key=ca_key, server=True),
        pki.serving_cert,
    )

    client_key = _key()
    _write_key(client_key, pki.kubelet_client_key)
    _write_cert(
        _cert(
            subject="kube-apiserver-kubelet-client",
            key=client_key,
            issuer=ca,
            issuer_key=ca_key,
            client=True,
            organization="kubeadm:cluster-admins",
        ),
        pki.kubelet_client_cert,
    )

    sa_key = _key()
    _write_key(sa_key, pki.sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    rows = []
    for identity in IDENTITIES:
        groups = f',"{",".join(identity.groups)}"' if identity.groups else ""
        rows.append(f"{secrets.token_hex(24)},{identity.user},{identity.name}{groups}")
    pki.tokens.write_text("\n".join(rows) + "\n")
    pki.tokens.chmod(0o600)
    return pki


def sign_serving_cert(pki: Pki, *, name: str, cert_path: Path, key_path: Path) -> None:
    """Issue a loopback serving certificate from the cluster CA (used by node endpoints)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = _key()
    _write_key(key, key_path)
    _write_cert(_cert(subject=name, key=key, issuer=ca, issuer_key=ca_key, server=True), cert_path)


def write_self_signed(*, name: str, cert_path: Path, key_path: Path) -> None:
    """A self-signed loopback serving certificate, for a server that only needs to start (a webhook
    server no API server calls: the upstream operator's, run beside the dev cluster by the benchmark)."""
    key = _key()
    _write_key(key, key_path)
    _write_cert(_cert(subject=name, key=key, issuer=None, issuer_key=key, server=True), cert_path)


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
