"""The process node's stand-in for cluster DNS: which names resolve, and which a container waits for."""

from __future__ import annotations

from typing import Any

from kubetrain.devcluster.processnode.network import Resolver

Obj = dict[str, Any]


def pod(name: str, labels: dict[str, str], **spec: str) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels}, "spec": spec}


def service(name: str, selector: dict[str, str]) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"selector": selector}}


def resolver(pods: list[Obj], services: list[Obj]) -> Resolver:
    addresses = {p["metadata"]["uid"]: f"127.1.0.{i + 1}" for i, p in enumerate(pods)}
    return Resolver(lambda: pods, lambda: services, lambda p: addresses.get(p["metadata"]["uid"]))


def test_every_form_of_a_service_name_resolves_to_its_pod() -> None:
    r = resolver([pod("m", {"app": "m"})], [service("job-master-0", {"app": "m"})])
    for name in (
        "job-master-0",
        "job-master-0.ns",
        "job-master-0.ns.svc",
        "job-master-0.ns.svc.cluster.local",
    ):
        assert r.resolve(name, "ns") == "127.1.0.1", name
    assert r.resolve("job-master-0", "other") is None


def test_hostname_and_subdomain_resolve_like_pod_dns() -> None:
    r = resolver([pod("p", {}, hostname="tj-node-0-1", subdomain="tj")], [])
    assert r.resolve("tj-node-0-1.tj", "ns") == "127.1.0.1"
    assert r.resolve("tj-node-0-1.tj.ns.svc.cluster.local", "ns") == "127.1.0.1"
    assert r.resolve("tj-node-0-0.tj", "ns") is None


def test_a_peer_of_the_same_job_is_waited_for_before_its_service_is_known() -> None:
    r = resolver([], [])
    text = "train-master-0:23456 python examples/train.py --out=results"
    assert r.waiting_for(text, "ns") == []
    assert r.waiting_for(text, "ns", ["train"]) == ["train-master-0"]
    assert r.waiting_for("tj-node-0-0.tj:29500", "ns", ["tj"]) == ["tj-node-0-0.tj"]


def test_a_known_service_without_a_pod_yet_is_waited_for() -> None:
    r = resolver([], [service("db", {"app": "db"})])
    assert r.waiting_for("db:5432", "ns") == ["db"]
