"""The status server's certificate: one given to the controller, or a CA of its own.

Pods verify the server against the CA they find in their job's ``<job>-tls-config``
ConfigMap. A deployment can give the controller a certificate (``--status-server-cert-dir``
with ``tls.crt``, ``tls.key`` and ``ca.crt``, as cert-manager writes them); without one
the controller makes a CA and a serving certificate for the server's host when it starts.
That CA lives as long as the process, so the reconcilers keep each job's ConfigMap on the
current CA (docs/observability.md says what a restart means for running pods).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class ServingCert:
    """PEM bytes of the serving certificate, its key and the CA that signed it."""

    cert: bytes
    key: bytes
    ca: bytes

    @classmethod
    def from_dir(cls, directory: Path) -> ServingCert:
        files = {name: directory / name for name in ("tls.crt", "tls.key", "ca.crt")}
        missing = [str(path) for path in files.values() if not path.is_file()]
        if missing:
            raise ValueError(f"--status-server-cert-dir: missing {', '.join(missing)}")
        return cls(files["tls.crt"].read_bytes(), files["tls.key"].read_bytes(), files["ca.crt"].read_bytes())

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as scratch:  # the ssl module loads a chain from files only
            cert, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert.write_bytes(self.cert)
            key.write_bytes(self.key)
            context.load_cert_chain(cert, key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def self_signed(hosts: Sequence[str]) -> ServingCert:
    """A new CA and a certificate it signs for ``hosts`` (names or IP addresses)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kubetrain-status-server-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([_alt_name(h) for h in dict.fromkeys(hosts)]), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return ServingCert(cert.public_bytes(pem), _pem_key(key), ca.public_bytes(pem))
