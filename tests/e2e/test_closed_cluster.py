"""A pod on the process node runs as a process of the developer's own account on the developer's own
machine, and still cannot take the cluster over: etcd, the fault proxy and the cluster's keys and
tokens are each refused to it (docs/process-node.md, docs/security.md). Postgres's side, password
logins only, is checked where its configuration is made (tests/unit/test_airflow_deploy.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from kubetrain.devcluster.cluster import DevCluster
from kubetrain.devcluster.faultproxy import FaultProxy
from tests.e2e.test_process_node import ON_PROCESS_NODE, wait_phase

# Run in the pod: each way in, and what became of it ("reached: ..." or "refused: ...").
PROBE = r"""
import json, os, ssl, urllib.error, urllib.request

state, etcd, proxy = os.environ["STATE"], os.environ["ETCD"], os.environ["PROXY"]
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

everything = b'{"key": "AA==", "range_end": "AA=="}'  # every key etcd holds
outcomes = {
    "etcd over plain HTTP": get(f"http://{etcd}/v3/kv/range", everything),
    "etcd over TLS without a client certificate": get(f"https://{etcd}/v3/kv/range", everything),
    "the fault proxy without credentials (plain HTTP)": get(f"http://{proxy}/api/v1/secrets"),
    "the fault proxy without credentials (TLS)": get(f"https://{proxy}/api/v1/secrets"),
}
for name in ("pki/ca.key", "pki/tokens.csv", "pki/sa.key", "kubeconfig", "process-node.kubeconfig"):
    outcomes[f"the cluster's {name}"] = read(os.path.join(state, name))
with open(os.path.join(os.environ["HOME"], "written"), "w") as mine:  # its own files it keeps
    mine.write("ok")
print("outcomes:", json.dumps(outcomes))  # a prefix: the client would parse a log that is JSON
"""


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
    env = {
        "STATE": str(dev_cluster.state_dir),
        "ETCD": f"127.0.0.1:{state.ports['etcd']}",
        "PROXY": fault_proxy.url.split("://", 1)[1],
    }
    container = {
        "name": "probe",
        "image": "python",
        "command": ["python", "-u", "-c", PROBE],
        "env": [{"name": k, "value": v} for k, v in env.items()],
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
    reached = {way: outcome for way, outcome in outcomes.items() if not outcome.startswith("refused")}
    assert not reached, f"a pod on the process node reached: {json.dumps(reached, indent=2)}"
    assert len(outcomes) == 9
    assert fault_proxy.exchanges == [], "the proxy forwarded a request that carried no credential"
