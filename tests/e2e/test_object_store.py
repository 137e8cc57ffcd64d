"""The dev cluster's S3 server, for real: a second create of a key is refused (the primitive the
checkpoint commit rests on), and a pod on the process node reaches it with the documented Secret."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import pytest
from kubernetes_asyncio import client

from kubetrain.devcluster.cluster import DevCluster
from tests.docs_commands import run_documented
from tests.e2e.test_process_node import pod, wait_phase


@pytest.fixture
def store(dev_cluster: DevCluster) -> fsspec.AbstractFileSystem:
    found = dev_cluster.object_store()
    if found is None:
        pytest.fail("the test cluster has no object store: start it with `kubetrain dev up --object-store`")
    return fsspec.filesystem(
        "s3",
        key=found.access_key,
        secret=found.secret_key,
        endpoint_url=found.endpoint,
        skip_instance_cache=True,
    )


def test_a_second_create_of_a_key_is_refused_and_the_first_object_stays(
    store: fsspec.AbstractFileSystem,
) -> None:
    key = f"kubetrain/tests/{uuid.uuid4().hex}/COMPLETE"
    store.pipe_file(key, b"first", mode="create")
    with pytest.raises(FileExistsError):
        store.pipe_file(key, b"second", mode="create")
    assert store.cat_file(key) == b"first"
    assert store.ls(key.rsplit("/", 1)[0]) == [key], "listing sees the object at once"


async def test_a_pod_reaches_the_server_with_the_documented_secret(
    dev_cluster: DevCluster,
    store: fsspec.AbstractFileSystem,
    core: client.CoreV1Api,
    namespace: str,
    shell: dict[str, str],
) -> None:
    run_documented(
        "docs/dev-cluster.md",
        'eval "$(kubetrain dev object-store)"',
        "kubetrain dev object-store --secret s3",
        env={**shell, "KUBETRAIN_DEV_STATE": str(dev_cluster.state_dir)},
        replace={"-n team": f"-n {namespace}"},
    )
    key = f"kubetrain/tests/{uuid.uuid4().hex}"
    script = f"import fsspec; fsspec.filesystem('s3').pipe_file({key!r}, b'from a pod', mode='create')"
    manifest = pod("writes-s3", script, container={"envFrom": [{"secretRef": {"name": "s3"}}]})
    await core.create_namespaced_pod(namespace, manifest)
    done = await wait_phase(core, namespace, "writes-s3", "Succeeded", "Failed")
    log = await core.read_namespaced_pod_log("writes-s3", namespace)
    assert done.status.phase == "Succeeded", log
    assert store.cat_file(key) == b"from a pod"
    assert Path(dev_cluster.state_dir / "object-store" / "data" / key).read_bytes() == b"from a pod"
