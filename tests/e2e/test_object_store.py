"""The dev cluster's S3 server, for real: a second create of a key is refused (the primitive the
checkpoint commit rests on), and a pod on the process node reaches it with the documented Secret."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from kubernetes_asyncio import client

from kubetrain.checkpoint import CheckpointManager, FencedOff
from kubetrain.client import AsyncJobClient, builders
from kubetrain.client.builders import JobSpec
from kubetrain.client.errors import InvalidJobError
from kubetrain.devcluster.cluster import DevCluster
from tests.docs_commands import run_documented
from tests.e2e.test_process_node import pod, wait_phase


@pytest.fixture
def store(dev_cluster: DevCluster) -> fsspec.AbstractFileSystem:
    found = dev_cluster.object_store()
    if found is None:
        pytest.fail("the test cluster has no object store: start it with `kubetrain dev up --object-store`")
    fs: fsspec.AbstractFileSystem = found.filesystem()
    return fs


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


@pytest.fixture
def s3_location(dev_cluster: DevCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix in the dev cluster's bucket, with this process's environment set as a pod's is."""
    found = dev_cluster.object_store()
    assert found is not None
    for name, value in found.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{found.bucket}/tests/{uuid.uuid4().hex}"


def test_checkpoints_commit_and_resume_through_the_real_s3_server(s3_location: str) -> None:
    ckpt = CheckpointManager(s3_location, rank=0, attempt=1, keep=2)
    for step in (10, 20, 30):
        ckpt.save({"step": step}, step)
    resumed = CheckpointManager(s3_location, rank=0, attempt=2)
    assert resumed.load_latest() == ({"step": 30}, 30)
    assert [c.step for c in resumed.checkpoints()] == [20, 30], "retention kept the newest two"
    duplicate = CheckpointManager(s3_location, rank=0, attempt=2)
    first, second = resumed.save({"by": "first"}, 40), duplicate.save({"by": "second"}, 40)
    assert first is not None and second is not None and second.meta["writer"] == first.meta["writer"]
    with pytest.raises(FencedOff):
        ckpt.save({"stale": True}, 50)


KILLED_AT_COMMIT = """
import os, signal, sys
from kubetrain.checkpoint import CheckpointManager
ckpt = CheckpointManager(sys.argv[1], rank=0)
ckpt.save(b"committed", 10)
real = ckpt.fs.pipe_file
def pipe_file(path, value, **kwargs):
    if "/COMPLETE-" in path:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, value, **kwargs)
ckpt.fs.pipe_file = pipe_file
ckpt.save(b"never committed", 20)
"""


def test_a_writer_killed_between_its_upload_and_its_commit_leaves_the_last_committed_step(
    s3_location: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AT_COMMIT, s3_location], check=False, capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    reader = CheckpointManager(s3_location, rank=0)
    assert reader.load_latest() == (b"committed", 10)
    assert any("step-00000020/" in key for key in reader.fs.find(reader.root)), "the upload happened"


async def test_a_job_whose_checkpoint_location_cannot_be_used_is_refused_before_any_pod(
    dev_cluster: DevCluster, core: client.CoreV1Api, namespace: str, crds: None
) -> None:
    store = dev_cluster.object_store()
    assert store is not None
    await core.create_namespaced_secret(namespace, store.secret("s3", namespace))
    await core.create_namespaced_secret(
        namespace, dataclasses.replace(store, secret_key="wrong").secret("bad", namespace)
    )

    def job(location: str, secret: str | None) -> dict[str, Any]:
        spec = JobSpec(
            name=f"p-{uuid.uuid4().hex[:6]}", image="img", checkpoint_dir=location, checkpoint_secret=secret
        )
        return builders.pytorchjob(spec)

    async with await AsyncJobClient.connect(kubeconfig=str(dev_cluster.kubeconfig)) as jobs:
        refusals = {
            "which namespace": job(f"s3://{store.bucket}/runs", "missing"),
            "the bucket does not exist": job("s3://no-such-bucket/runs", "s3"),
            "with the credentials of Secret": job(f"s3://{store.bucket}/runs", "bad"),
        }
        for message, manifest in refusals.items():
            with pytest.raises(InvalidJobError, match=message):
                await jobs.create(manifest, namespace=namespace)
        created = await jobs.create(job(f"s3://{store.bucket}/runs", "s3"), namespace=namespace)
        assert created["metadata"]["uid"]
    assert not (await core.list_namespaced_pod(namespace)).items
