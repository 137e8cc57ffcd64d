"""The dev cluster's S3 server, without a cluster: its credentials, the environment clients read, and
the readiness probe (``kubetrain/devcluster/objectstore.py``)."""

from __future__ import annotations

import http.server
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.devcluster import objectstore
from kubetrain.devcluster.cluster import ClusterOptions


def test_a_cluster_has_its_own_credentials_kept_private_and_a_bucket(tmp_path: Path) -> None:
    layout = objectstore.Layout(tmp_path)
    store = layout.prepare(9000)
    assert store.endpoint == "http://127.0.0.1:9000" and (layout.data / "kubetrain").is_dir()
    assert stat.S_IMODE(layout.credentials.stat().st_mode) == 0o600
    assert layout.load() == store
    assert objectstore.Layout(tmp_path / "other").prepare(9000).secret_key != store.secret_key
    argv = objectstore.command("versitygw", store, layout.data)
    assert store.secret_key not in " ".join(argv), "the secret is passed in the environment, not on ps"
    assert objectstore.server_env(store)["ROOT_SECRET_ACCESS_KEY"] == store.secret_key


def test_clients_get_what_the_aws_sdks_read_and_pods_a_secret(tmp_path: Path) -> None:
    store = objectstore.ObjectStore("http://127.0.0.1:9000", "AK", "SK")
    assert store.env() == {
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SK",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    secret = store.secret("s3", "team")
    assert secret["metadata"] == {"name": "s3", "namespace": "team"} and secret["stringData"] == store.env()


def test_the_server_is_built_and_run_only_when_asked_for() -> None:
    plain, with_store = ClusterOptions(), ClusterOptions(object_store=True)
    assert "versitygw" not in plain.binaries() and "versitygw" in with_store.binaries()
    assert not plain.runs("object-store") and with_store.runs("object-store") and plain.runs("etcd")


class _Answer(http.server.BaseHTTPRequestHandler):
    code = 403

    def do_GET(self) -> None:
        self.send_response(self.code)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[http.server.HTTPServer]:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def test_the_server_is_ready_once_the_s3_api_answers_even_with_a_refusal(
    server: http.server.HTTPServer,
) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    assert objectstore.S3Answers(url).probe(), "an unsigned request refused with 403 means it is up"
    _Answer.code = 500
    try:
        assert not objectstore.S3Answers(url).probe()
    finally:
        _Answer.code = 403
    assert not objectstore.S3Answers("http://127.0.0.1:1").probe()
