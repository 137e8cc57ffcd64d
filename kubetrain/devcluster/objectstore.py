"""A real S3 server beside the local cluster: ``kubetrain dev up --object-store``.

Training keeps its checkpoints in object storage on a cloud cluster, and S3 has what a volume lacks
and what the checkpoint commit protocol relies on: no rename, and a conditional create
(``If-None-Match: *``, answered 412 when the key exists). A mock would not prove that, so the dev
cluster runs a real S3 server: versitygw (Apache-2.0), built from the Go module proxy like the
control plane, serving S3 over a directory of the cluster's state (each top-level directory a
bucket). It listens on 127.0.0.1 with credentials made for this cluster, so pods on the process node
and the tests talk real S3 over HTTP. ``kubetrain dev object-store`` prints the environment a client
needs (the variables the AWS SDKs, s3fs and fsspec read) or puts it into a Secret for pods.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NAME = "object-store"
BUCKET = "kubetrain"  # the bucket made at start; any directory made under the root is one too
REGION = "us-east-1"


@dataclass(frozen=True)
class ObjectStore:
    """Where the cluster's S3 server is and the credentials it takes."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str = BUCKET
    region: str = REGION

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def env(self) -> dict[str, str]:
        """What an S3 client needs, as the AWS SDKs (and so s3fs and fsspec) read it from the environment."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": self.region,
        }

    def filesystem(self) -> Any:
        """An fsspec S3 filesystem of this server, with its credentials (s3fs, the objectstore extra)."""
        import fsspec

        return fsspec.filesystem(
            "s3",
            key=self.access_key,
            secret=self.secret_key,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": self.region},
            skip_instance_cache=True,
        )

    def secret(self, name: str, namespace: str) -> dict[str, object]:
        """A Secret holding ``env()``, for a pod's ``envFrom`` (or a job's checkpoint secret)."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "stringData": self.env(),
        }


class Layout:
    """The server's files in the cluster's state dir: its data root and its credentials."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / NAME
        self.data = self.root / "data"
        self.credentials = self.root / "credentials.json"

    def prepare(self, port: int) -> ObjectStore:
        """Make the data root, the default bucket and credentials of this cluster's own."""
        (self.data / BUCKET).mkdir(parents=True, exist_ok=True)
        store = ObjectStore(f"http://127.0.0.1:{port}", "kt" + secrets.token_hex(8), secrets.token_hex(20))
        self.credentials.write_text(json.dumps(asdict(store)))
        self.credentials.chmod(0o600)
        return store

    def load(self) -> ObjectStore | None:
        try:
            return ObjectStore(**json.loads(self.credentials.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def command(binary: str, store: ObjectStore, data: Path) -> list[str]:
    """The server's command line (the credentials go in its environment, not in ``ps``)."""
    return [
        binary,
        "--port",
        f"127.0.0.1:{store.port}",
        "--region",
        store.region,
        "--quiet",
        "posix",
        str(data),
    ]


def server_env(store: ObjectStore) -> dict[str, str]:
    return {"ROOT_ACCESS_KEY_ID": store.access_key, "ROOT_SECRET_ACCESS_KEY": store.secret_key}


@dataclass(frozen=True)
class S3Answers:
    """Ready once the S3 API answers at all: an unsigned request is refused (403) by a server that is up."""

    url: str

    @property
    def what(self) -> str:
        return self.url

    def probe(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=timeout) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError as refused:
            return refused.code == 403
        except OSError:
            return False
