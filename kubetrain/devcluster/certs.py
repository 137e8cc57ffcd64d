"""The cluster's keys and certificates, made with ``cryptography``.

Apart from ``pki`` (paths, identities, tokens, kubeconfigs), so that importing the dev cluster's
modules (every ``kubetrain`` command does, the controller's too) does not load ``cryptography``,
about 8 MiB in each process: only ``kubetrain dev up`` and the benchmark make keys, and they import
this module when they do.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubetrain.devcluster.pki import Pki, write_tokens


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


def generate(root: Path) -> Pki:
    """Create a CA, serving and client certificates, service-account keys and tokens under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    pki = Pki(root)
    issue_cluster_certs(pki)
    write_tokens(pki)
    return pki


def issue_cluster_certs(pki: Pki) -> None:
    """The CA, the API server's serving and kubelet-client certificates, the service-account keys."""
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

    issue_etcd_certs(pki)

    sa_key = _key()
    _write_key(sa_key, pki.sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def issue_etcd_certs(pki: Pki) -> None:
    """etcd's own CA, its certificate (serving its clients and its peer port) and the one client
    certificate it takes, the API server's. The CA's key is never written: no other certificate
    etcd would take can be made afterwards."""
    ca_key = _key()
    ca = _cert(subject="kubetrain-dev-etcd-ca", key=ca_key, issuer=None, issuer_key=ca_key, ca=True)
    _write_cert(ca, pki.etcd_ca_cert)
    etcd_key = _key()
    _write_key(etcd_key, pki.etcd_key)
    _write_cert(
        _cert(subject="etcd", key=etcd_key, issuer=ca, issuer_key=ca_key, server=True, client=True),
        pki.etcd_cert,
    )
    client_key = _key()
    _write_key(client_key, pki.etcd_client_key)
    _write_cert(
        _cert(
            subject="kube-apiserver-etcd-client", key=client_key, issuer=ca, issuer_key=ca_key, client=True
        ),
        pki.etcd_client_cert,
    )


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


def throwaway_serving(name: str) -> tuple[bytes, bytes, bytes]:
    """A loopback serving certificate from a CA made for it alone, whose key is never kept (the fault
    proxy's): the CA's PEM for the clients to trust, the certificate's and its key's PEM."""
    ca_key = _key()
    ca = _cert(subject=f"{name}-ca", key=ca_key, issuer=None, issuer_key=ca_key, ca=True)
    key = _key()
    cert = _cert(subject=name, key=key, issuer=ca, issuer_key=ca_key, server=True)
    return (
        ca.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )
