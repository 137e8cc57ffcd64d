"""What ``kubetrain dev up`` writes of the cluster's keys: unreadable to other users, and for etcd a
CA of its own whose key is gone once it signed the only client certificate etcd takes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from kubetrain.devcluster import certs


def test_etcd_takes_a_certificate_only_its_own_ca_signed_and_that_ca_s_key_is_not_kept(
    tmp_path: Path,
) -> None:
    keys = certs.generate(tmp_path / "pki")
    etcd_ca = x509.load_pem_x509_certificate(keys.etcd_ca_cert.read_bytes())
    cluster_ca = x509.load_pem_x509_certificate(keys.ca_cert.read_bytes())
    client = x509.load_pem_x509_certificate(keys.etcd_client_cert.read_bytes())
    client.verify_directly_issued_by(etcd_ca)
    with pytest.raises(ValueError):
        client.verify_directly_issued_by(cluster_ca)
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # No other certificate of the cluster is one etcd would take: none is signed by its CA.
    for other in (keys.serving_cert, keys.kubelet_client_cert):
        with pytest.raises(ValueError):
            x509.load_pem_x509_certificate(other.read_bytes()).verify_directly_issued_by(etcd_ca)
    assert not any("etcd-ca" in path.name and path.suffix == ".key" for path in keys.root.iterdir())


def test_the_keys_and_tokens_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    keys = certs.generate(tmp_path / "pki")
    assert stat.S_IMODE(keys.root.stat().st_mode) == 0o700
    secret = [*keys.root.glob("*.key"), keys.tokens]
    assert len(secret) >= 6
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in secret} == {
        path.name: 0o600 for path in secret
    }
