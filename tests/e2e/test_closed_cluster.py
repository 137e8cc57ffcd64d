"""A pod on the process node runs as a process of the developer's own account on the developer's own
machine, and still cannot take the cluster over: etcd, the fault proxy and the cluster's keys and
tokens are each refused to it (docs/process-node.md, docs/security.md). Postgres is probed the same
way where an Airflow deployment runs (tests/airflow/deployment/test_deployment.py), and its
configuration where it is made (tests/unit/test_airflow_deploy.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from kubetrain.devcluster.cluster import DevCluster
from tests.e2e.test_process_node import ON_PROCESS_NODE, wait_phase
from tests.faultinjection.faultproxy import FaultProxy

# Run in the pod: each way in, and what became of it ("reached: ..." or "refused: ...").
PROBE = r"""
import json, os, socket, ssl, struct, urllib.error, urllib.request

anyone = ssl.create_default_context()
anyone.check_hostname, anyone.verify_mode = False, ssl.CERT_NONE  # no certificate of its own

def get(url, data=None):
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=anyone) as answer:
            return f"reached: HTTP {answer.status} {answer.read(200)!r}"
    except urllib.error.HTTPError as exc:
        return f"refused: HTTP {exc.code}" if exc.code >= 400 else f"reached: HTTP {exc.code}"
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {exc}"

def read(path):
    try:
        with open(path, "rb") as secret:
            return f"reached: {len(secret.read())} bytes"
    except OSError as exc:
        return f"refused: {type(exc).__name__}: {exc}"

def postgres(address):
    # A startup message as the superuser: trust answers AuthenticationOk (0); else it asks for a password.
    host, port = address.rsplit(":", 1)
    params = b"user\0postgres\0database\0airflow\0\0"
    try:
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
            kind, _, code = struct.unpack("!cii", conn.recv(9))
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {exc}"
    if kind == b"R" and code == 0:
        return "reached: logged in as the superuser without a password"
    return f"refused: asked for a password (message {kind!r}, authentication {code})"

outcomes = {}
if "ETCD" in os.environ:
    everything = b'{"key": "AA==", "range_end": "AA=="}'  # every key etcd holds
    outcomes["etcd over plain HTTP"] = get(f"http://{os.environ['ETCD']}/v3/kv/range", everything)
    outcomes["etcd over TLS without a client certificate"] = get(f"https://{os.environ['ETCD']}/v3/kv/range", everything)
if "PROXY" in os.environ:
    for scheme in ("http", "https"):
        outcomes[f"the fault proxy without credentials ({scheme})"] = get(f"{scheme}://{os.environ['PROXY']}/api/v1/secrets")
if "STATE" in os.environ:
    for name in ("pki/ca.key", "pki/tokens.csv", "pki/sa.key", "kubeconfig", "process-node.kubeconfig"):
        outcomes[f"the cluster's {name}"] = read(os.path.join(os.environ["STATE"], name))
if "POSTGRES" in os.environ:
    outcomes["the Airflow deployment's Postgres"] = postgres(os.environ["POSTGRES"])
with open(os.path.join(os.environ["HOME"], "written"), "w") as mine:  # its own files it keeps
    mine.write("ok")
print("outcomes:", json.dumps(outcomes))  # a prefix: the client would parse a log that is JSON
"""


async def ways_in_from_a_pod(
    core: client.CoreV1Api, namespace: str, targets: dict[str, str]
) -> dict[str, str]:
    """What a pod on the process node made of each way in (``PROBE``, given ``targets`` in its env):
    the outcome of each, by name."""
    container = {
        "name": "probe",
        "image": "python",
        "command": ["python", "-u", "-c", PROBE],
        "env": [{"name": k, "value": v} for k, v in targets.items()],
    }
    pod = {
        "metadata": {"name": "probe"},
        "spec": {**ON_PROCESS_NODE, "restartPolicy": "Never", "containers": [container]},
    }
    await core.create_namespaced_pod(namespace, pod)
    done = await wait_phase(core, namespace, "probe", "Succeeded", "Failed", timeout=120)
    log = await core.read_namespaced_pod_log("probe", namespace)
    assert done.status.phase == "Succeeded", log
    outcomes: dict[str, str] = json.loads(log.strip().splitlines()[-1].removeprefix("outcomes: "))
    return outcomes


def reached(outcomes: dict[str, str]) -> str:
    """The ways in that were not refused, for the assertion message (empty: none)."""
    found = {way: outcome for way, outcome in outcomes.items() if not outcome.startswith("refused")}
    return json.dumps(found, indent=2) if found else ""


@pytest.fixture
async def fault_proxy(kubeconfig: Path) -> AsyncIterator[FaultProxy]:
    proxy = FaultProxy.for_kubeconfig(kubeconfig)
    await proxy.start()
    yield proxy
    await proxy.stop()


async def test_a_pod_on_the_process_node_is_refused_etcd_the_fault_proxy_and_the_cluster_s_keys(
    dev_cluster: DevCluster, fault_proxy: FaultProxy, core: client.CoreV1Api, namespace: str
) -> None:
    state = dev_cluster.load_state()
    assert state is not None
    targets = {
        "STATE": str(dev_cluster.state_dir),
        "ETCD": f"127.0.0.1:{state.ports['etcd']}",
        "PROXY": fault_proxy.url.split("://", 1)[1],
    }
    outcomes = await ways_in_from_a_pod(core, namespace, targets)
    assert not reached(outcomes), f"a pod on the process node reached: {reached(outcomes)}"
    assert len(outcomes) == 9
    assert fault_proxy.exchanges == [], "the proxy forwarded a request that carried no credential"
