"""Kueue on the dev cluster: its configuration, its webhooks rewritten for a process on the loopback
address, the release its build installs and where, and the options of ``kubetrain dev up --kueue``."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from pathlib import Path

import pytest

from kubetrain.devcluster import build, kueue
from kubetrain.devcluster.cluster import ClusterOptions
from kubetrain.devcluster.errors import DevClusterError

MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kubeflow-org-v1-pytorchjob}
  failurePolicy: Fail
  name: mpytorchjob.kb.io
  rules:
  - {apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE], resources: [pytorchjobs]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload}
  failurePolicy: Fail
  name: mworkload.kb.io
  rules:
  - {apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads]}
  sideEffects: None
"""


def test_the_webhooks_call_the_loopback_port_and_trust_the_cluster_ca() -> None:
    [mutating] = kueue.webhook_configurations(MANIFESTS, port=9443, ca_bundle=b"PEM")
    assert mutating["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    hooks = {h["name"]: h for h in mutating["webhooks"]}
    assert hooks["mpytorchjob.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-kubeflow-org-v1-pytorchjob",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert hooks["mpytorchjob.kb.io"]["failurePolicy"] == "Fail"  # the rest is Kueue's, unchanged


def test_only_the_enabled_kinds_and_kueue_s_own_are_admitted_never_every_pod() -> None:
    [mutating] = kueue.webhook_configurations(MANIFESTS, port=9443, ca_bundle=b"PEM")
    assert [h["name"] for h in mutating["webhooks"]] == ["mpytorchjob.kb.io", "mworkload.kb.io"]


def test_the_configuration_enables_every_kubetrain_kind_on_loopback_ports(tmp_path: Path) -> None:
    config = kueue.configuration(webhook_port=1, health_port=2, metrics_port=3, cert_dir=tmp_path)
    assert config["integrations"]["frameworks"] == [
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/paddlejob",
        "kubeflow.org/jaxjob",
        "trainer.kubeflow.org/trainjob",
    ]
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": str(tmp_path)}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:2"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:3"}
    assert config["internalCertManagement"] == {"enable": False}
    assert "waitForPodsReady" not in config


def test_wait_for_pods_ready_is_set_only_when_asked(tmp_path: Path) -> None:
    config = kueue.configuration(
        webhook_port=1,
        health_port=2,
        metrics_port=3,
        cert_dir=tmp_path,
        pods_ready_timeout=20,
    )
    assert config["waitForPodsReady"]["timeout"] == "20s"


def test_the_worker_lost_timeout_is_kueue_s_own_unless_asked(tmp_path: Path) -> None:
    ports = {"webhook_port": 1, "health_port": 2, "metrics_port": 3, "cert_dir": tmp_path}
    assert "multiKueue" not in kueue.configuration(**ports)
    config = kueue.configuration(**ports, worker_lost_timeout=5)
    assert config["multiKueue"] == {"workerLostTimeout": "5s"}


def test_the_jobset_release_is_the_one_kueue_requires() -> None:
    go_mod = "module sigs.k8s.io/kueue\n\nrequire (\n\tk8s.io/api v0.35.3\n\tsigs.k8s.io/jobset v0.11.1\n)\n"
    assert kueue.required_version(go_mod, "sigs.k8s.io/jobset") == "v0.11.1"
    with pytest.raises(DevClusterError, match=r"sigs.k8s.io/nothing is not required"):
        kueue.required_version(go_mod, "sigs.k8s.io/nothing")


def test_kueue_is_installed_at_its_release_into_a_folder_of_that_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBETRAIN_CACHE", str(tmp_path))
    [target] = [t for t in build.TARGETS if t.binary == "kueue"]
    assert target.path == tmp_path / "bin" / f"kueue-{build.KUEUE_VERSION}" / "kueue"
    argv, env = build._build_argv("go", target, target.path.parent / ".install" / "kueue")
    assert argv[:2] == ["go", "install"] and argv[-1] == f"sigs.k8s.io/kueue/cmd/kueue@{build.KUEUE_VERSION}"
    assert env["GOBIN"] == str(target.path.parent / ".install")


def test_a_cluster_without_kueue_needs_no_kueue_binary() -> None:
    assert "kueue" not in ClusterOptions().binaries()
    assert "kueue" in ClusterOptions(kueue=True).binaries()


def test_the_pods_ready_timeout_needs_kueue() -> None:
    with pytest.raises(DevClusterError, match="--kueue-pods-ready-timeout needs --kueue"):
        ClusterOptions(kueue_pods_ready_timeout=10).validate()


@pytest.mark.parametrize("seconds", [0, -1])
def test_the_worker_lost_timeout_needs_kueue_and_a_positive_number(seconds: float) -> None:
    with pytest.raises(DevClusterError, match="--kueue-worker-lost-timeout needs --kueue"):
        ClusterOptions(kueue_worker_lost_timeout=5).validate()
    with pytest.raises(DevClusterError, match=rf"--kueue-worker-lost-timeout .* \(got {seconds} "):
        ClusterOptions(kueue=True, kueue_worker_lost_timeout=seconds).validate()


def test_the_stamps_of_wrapper_built_binaries_do_not_change_with_installed_releases() -> None:
    # A changed stamp rebuilds every cached binary on the machine (a shared cache): the stamp of a
    # wrapper-built binary is what it was before installed releases existed.
    [etcd] = [t for t in build.TARGETS if t.binary == "etcd"]
    digest = hashlib.sha256()
    for name, data in sorted(build._module_files("etcd").items()):
        digest.update(name.encode() + b"\0" + data)
    digest.update("\0".join((etcd.package, *etcd.ldflags, "go1.26.0")).encode())
    assert build._stamp(etcd, "go1.26.0") == digest.hexdigest()
    [kueue_target] = [t for t in build.TARGETS if t.binary == "kueue"]
    assert build._stamp(kueue_target, "go1.26.0") != build._stamp(
        dataclasses.replace(kueue_target, version="v0.0.1"), "go1.26.0"
    )
