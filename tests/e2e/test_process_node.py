"""The process node behaves like a kubelet, as far as a training job can tell."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes_asyncio import client

from kubetrain.client.aio import pod_log
from kubetrain.devcluster import process
from kubetrain.devcluster.cluster import PROCESS_NODE, DevCluster
from kubetrain.devcluster.processnode import containers, volumes
from kubetrain.kube.client import KubeClient
from tests.conftest import Kubectl
from tests.support import eventually

ON_PROCESS_NODE = {
    "nodeSelector": {"kubetrain.dev/process-node": "true"},
    "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists"}],
}


def pod(
    name: str,
    script: str,
    *,
    restart: str = "Never",
    extra: dict[str, Any] | None = None,
    container: dict[str, Any] | None = None,
) -> dict[str, Any]:
    main = {"name": "main", "image": "python", "command": ["python", "-u", "-c", script], **(container or {})}
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {**ON_PROCESS_NODE, "restartPolicy": restart, "containers": [main], **(extra or {})},
    }


async def wait_phase(
    core: client.CoreV1Api, namespace: str, name: str, *phases: str, timeout: float = 60
) -> client.V1Pod:
    async def probe() -> client.V1Pod | None:
        current = await core.read_namespaced_pod(name, namespace)
        return current if current.status.phase in phases else None

    return await eventually(probe, timeout=timeout, what=f"pod {name} to be {'/'.join(phases)}")


async def test_the_node_is_ready_with_host_capacity_and_a_lease(
    core: client.CoreV1Api, api_client: client.ApiClient
) -> None:
    node = await core.read_node(PROCESS_NODE)
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert node.status.capacity["cpu"] == str(psutil.cpu_count())
    assert ("InternalIP", "127.0.0.1") in [(a.type, a.address) for a in node.status.addresses]
    assert node.metadata.labels["kubetrain.dev/process-node"] == "true"
    lease = await client.CoordinationV1Api(api_client).read_namespaced_lease(PROCESS_NODE, "kube-node-lease")
    assert lease.spec.holder_identity == PROCESS_NODE and lease.spec.renew_time is not None


async def test_a_pod_with_resource_requests_runs_to_success(core: client.CoreV1Api, namespace: str) -> None:
    # The API server gives such a pod the Burstable QoS class, immutable: a status write that says
    # otherwise is refused, and the pod stayed Pending while its process ran.
    resources = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    await core.create_namespaced_pod(
        namespace, pod("sized", "print('ran')", container={"resources": resources})
    )
    done = await wait_phase(core, namespace, "sized", "Succeeded", "Failed")
    assert done.status.phase == "Succeeded" and done.status.qos_class == "Burstable"
    assert await core.read_namespaced_pod_log("sized", namespace) == "ran\n"


async def test_a_log_that_is_json_is_read_as_its_text(core: client.CoreV1Api, namespace: str) -> None:
    # The generated client parses any response as JSON first: a log of one line "null" came back as
    # None, and "42" as an int.
    await core.create_namespaced_pod(namespace, pod("json", "print('null')"))
    await wait_phase(core, namespace, "json", "Succeeded")
    assert await pod_log(core, "json", namespace) == "null\n"
    with pytest.raises(client.ApiException) as missing:
        await pod_log(core, "json", namespace, container="absent")
    assert missing.value.status == 400 and "absent" in missing.value.body


async def test_env_comes_from_fields_config_maps_and_secrets(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"lr": "0.1"}})
    await core.create_namespaced_secret(
        namespace, {"metadata": {"name": "sec"}, "stringData": {"token": "s3cret"}}
    )
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "lr"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
        {"name": "COMBINED", "value": "$(POD)-$(LR)"},
    ]
    script = "import os, json; print(json.dumps({k: os.environ[k] for k in ['POD','NS','APP','IP','LR','TOKEN','COMBINED']}))"
    await core.create_namespaced_pod(namespace, pod("envy", script, container={"env": env}))
    done = await wait_phase(core, namespace, "envy", "Succeeded")
    seen = json.loads(kubectl("logs", "envy", "-n", namespace).stdout)
    assert seen == {
        "POD": "envy",
        "NS": namespace,
        "APP": "envy",
        "IP": done.status.pod_ip,
        "LR": "0.1",
        "TOKEN": "s3cret",
        "COMBINED": "envy-0.1",
    }
    assert done.status.pod_ip.startswith("127.")


async def test_service_names_in_env_resolve_to_the_pod_behind_them(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    server = "import http.server, socketserver; socketserver.TCPServer(('0.0.0.0', 8765), http.server.SimpleHTTPRequestHandler).serve_forever()"
    await core.create_namespaced_pod(namespace, pod("server", server))
    await wait_phase(core, namespace, "server", "Running")
    await core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"clusterIP": "None", "selector": {"app": "server"}, "ports": [{"port": 8765}]},
        },
    )
    forms = ["web", f"web.{namespace}", f"web.{namespace}.svc", f"web.{namespace}.svc.cluster.local"]
    env = [{"name": f"ADDR{i}", "value": f"{name}:8765"} for i, name in enumerate(forms)]
    # The server may still be binding its port when the caller starts, as in any
    # cluster; like real clients, the caller retries refused connections.
    client_script = (
        "import os, time, urllib.request\n"
        "for i in range(4):\n"
        "    addr = os.environ[f'ADDR{i}']\n"
        "    for attempt in range(60):\n"
        "        try:\n"
        "            urllib.request.urlopen(f'http://{addr}/', timeout=10).read()\n"
        "            break\n"
        "        except OSError:\n"
        "            time.sleep(0.5)\n"
        "    else:\n"
        "        raise SystemExit(f'{addr} never answered')\n"
        "    print('reached', addr)\n"
    )
    await core.create_namespaced_pod(namespace, pod("caller", client_script, container={"env": env}))
    done = await wait_phase(core, namespace, "caller", "Succeeded", "Failed")
    out = kubectl("logs", "caller", "-n", namespace).stdout
    server_ip = (await core.read_namespaced_pod("server", namespace)).status.pod_ip
    assert done.status.phase == "Succeeded", out
    assert out.count(f"reached {server_ip}:8765") == 4


async def test_restart_policy_on_failure_restarts_in_place(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    script = "import os, sys, pathlib; p = pathlib.Path(os.environ['HOME'], 'runs'); n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); print('run', n); sys.exit(0 if n >= 2 else 4)"
    await core.create_namespaced_pod(namespace, pod("flaky", script, restart="OnFailure"))
    done = await wait_phase(core, namespace, "flaky", "Succeeded", timeout=90)
    status = done.status.container_statuses[0]
    assert status.restart_count == 2
    assert status.last_state.terminated.exit_code == 4
    assert kubectl("logs", "flaky", "-n", namespace).stdout.strip() == "run 2"
    assert kubectl("logs", "flaky", "-n", namespace, "--previous").stdout.strip() == "run 1"


async def test_a_failing_container_under_never_fails_the_pod_with_its_message(
    core: client.CoreV1Api, namespace: str
) -> None:
    script = "import os, sys; open(os.environ['KUBETRAIN_TERMINATION_MESSAGE_PATH'], 'w').write('out of cheese'); sys.exit(7)"
    await core.create_namespaced_pod(namespace, pod("fails", script))
    done = await wait_phase(core, namespace, "fails", "Failed")
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message, terminated.reason) == (7, "out of cheese", "Error")


async def test_init_containers_run_first_and_logs_select_containers(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    extra = {
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "initContainers": [
            {
                "name": "prepare",
                "image": "sh",
                "command": ["sh", "-c", "echo prepared; echo ready > /data/flag"],
                "volumeMounts": [{"name": "shared", "mountPath": "/data"}],
            }
        ],
    }
    script = "print(open('/data/flag').read().strip())"
    container = {"volumeMounts": [{"name": "shared", "mountPath": "/data"}]}
    await core.create_namespaced_pod(namespace, pod("ordered", script, extra=extra, container=container))
    await wait_phase(core, namespace, "ordered", "Succeeded")
    assert kubectl("logs", "ordered", "-n", namespace, "-c", "prepare").stdout.strip() == "prepared"
    assert kubectl("logs", "ordered", "-n", namespace, "-c", "main").stdout.strip() == "ready"


async def test_logs_follow_and_tail(core: client.CoreV1Api, namespace: str, kubectl: Kubectl) -> None:
    script = "import time\nfor i in range(8):\n    print('line', i)\n    time.sleep(0.3)"
    await core.create_namespaced_pod(namespace, pod("chatty", script))
    await wait_phase(core, namespace, "chatty", "Running")
    followed = await asyncio.to_thread(kubectl, "logs", "-f", "chatty", "-n", namespace)
    assert followed.stdout.split("\n")[:8] == [f"line {i}" for i in range(8)]
    await wait_phase(core, namespace, "chatty", "Succeeded")
    assert kubectl("logs", "chatty", "-n", namespace, "--tail=2").stdout.split() == ["line", "6", "line", "7"]
    stamped = kubectl("logs", "chatty", "-n", namespace, "--timestamps", "--tail=1").stdout
    assert stamped.split(" ", 1)[1].strip() == "line 7" and stamped.startswith("20")
    api_log = await core.read_namespaced_pod_log("chatty", namespace, tail_lines=1)
    assert api_log.strip() == "line 7"


async def test_deleting_a_pod_sigterms_then_sigkills_after_the_grace_period(
    core: client.CoreV1Api, namespace: str
) -> None:
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))\nprint('up', flush=True)\ntime.sleep(600)"
    await core.create_namespaced_pod(
        namespace, pod("stubborn", stubborn, extra={"terminationGracePeriodSeconds": 2})
    )
    await wait_phase(core, namespace, "stubborn", "Running")
    await eventually(lambda: _running_in(namespace, 1), what="the process to start")
    started = time.monotonic()
    await core.delete_namespaced_pod("stubborn", namespace)
    await eventually(lambda: _running_in(namespace, 0), timeout=15, what="the process to be killed")
    assert time.monotonic() - started >= 1.5, "the grace period was not honoured"
    await eventually(lambda: _gone(core, namespace, "stubborn"), what="the pod object to be removed")


async def _running_in(namespace: str, count: int) -> bool:
    found = 0
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("KUBETRAIN_POD_NAMESPACE") == namespace:
                found += 1
        except psutil.Error:
            continue
    return found == count


async def _gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        await core.read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        return exc.status == 404
    return False


async def test_a_persistent_volume_claim_outlives_its_pods(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    await core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "keep"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    volume = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "keep"}}]}
    mount = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    await core.create_namespaced_pod(
        namespace, pod("writer", "open('/data/note', 'w').write('kept')", extra=volume, container=mount)
    )
    await wait_phase(core, namespace, "writer", "Succeeded")
    await core.create_namespaced_pod(
        namespace, pod("reader", "print(open('/data/note').read())", extra=volume, container=mount)
    )
    await wait_phase(core, namespace, "reader", "Succeeded")
    assert kubectl("logs", "reader", "-n", namespace).stdout.strip() == "kept"

    # Deleted once no pod uses it: the claim, its volume and the host directory go.
    claim = await core.read_namespaced_persistent_volume_claim("keep", namespace)
    volume_path = Path((await core.read_persistent_volume(claim.spec.volume_name)).spec.host_path.path)
    assert (volume_path / "note").exists()
    for name in ("writer", "reader"):
        await core.delete_namespaced_pod(name, namespace)
    await core.delete_namespaced_persistent_volume_claim("keep", namespace)

    async def released() -> bool:
        claims = (await core.list_namespaced_persistent_volume_claim(namespace)).items
        volumes = [
            v
            for v in (await core.list_persistent_volume()).items
            if v.metadata.name == claim.spec.volume_name
        ]
        return not claims and not volumes and not volume_path.exists()

    await eventually(released, timeout=60, what="the claim, its volume and its directory to be deleted")


def test_the_log_endpoint_demands_the_cluster_client_certificate(dev_cluster: DevCluster) -> None:
    state = dev_cluster.load_state()
    assert state is not None
    url = f"https://127.0.0.1:{state.ports['process-node']}/containerLogs/default/x/y"
    context = ssl.create_default_context(cafile=str(dev_cluster.pki.ca_cert))
    try:
        urllib.request.urlopen(url, context=context, timeout=10)
        raise AssertionError("an anonymous client read logs")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401
    port = state.ports["process-node"]
    addresses = {
        c.laddr.ip for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port
    }
    assert addresses == {"127.0.0.1"}, f"the process node listens on {addresses}"


LISTENER = """
import socket, time
import torch.distributed as dist
server = socket.create_server(("", 23456))  # every PyTorchJob's MASTER_PORT, on the wildcard address
mine = socket.create_connection(("127.0.0.1", 23456))  # localhost is the pod's own
accepted, _ = server.accept()
store = dist.TCPStore("localhost", 29500, 1, True, wait_for_workers=False)  # torchrun's port
store.set("pod", "{name}")
print("listening on", server.getsockname()[0], "store says", store.get("pod").decode(), flush=True)
time.sleep(6)  # still listening while the other pod starts
"""


async def test_two_pods_listen_on_one_port_each_on_its_own_address(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    for name in ("first", "second"):
        await core.create_namespaced_pod(namespace, pod(name, LISTENER.format(name=name)))
    addresses = {}
    for name in ("first", "second"):
        done = await wait_phase(core, namespace, name, "Succeeded", "Failed", timeout=120)
        out = kubectl("logs", name, "-n", namespace).stdout
        assert done.status.phase == "Succeeded", out
        assert f"store says {name}" in out, out
        addresses[name] = out.split("listening on ")[1].split()[0]
        assert addresses[name] == done.status.pod_ip, "the wildcard listener is on the pod's own address"
    assert addresses["first"] != addresses["second"]


async def test_a_command_named_like_a_service_is_still_the_program(
    core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    # A TrainJob named like its command (`tune run`, a TrainJob "tune") has a Service of that name.
    await core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "python"}, "spec": {"clusterIP": "None", "selector": {"app": "python"}}},
    )
    await core.create_namespaced_pod(namespace, pod("python", "print('the program ran')"))
    done = await wait_phase(core, namespace, "python", "Succeeded", "Failed")
    out = kubectl("logs", "python", "-n", namespace).stdout
    assert done.status.phase == "Succeeded" and "the program ran" in out, out


async def test_a_projected_token_is_renewed_before_it_expires_and_kept_while_renewal_fails(
    api_client: client.ApiClient,
    kubeconfig: Path,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the process node does for a running pod's projected token, with its lifetime compressed:
    the file is replaced by a new valid token, and kept as it is while the API server refuses a new one."""
    caplog.set_level(logging.WARNING, logger=volumes.log.name)
    audience = "kubetrain-test"
    source = {"serviceAccountToken": {"audience": audience, "expirationSeconds": 600, "path": "token"}}
    held = pod("holder", "pass", extra={"volumes": [{"name": "token", "projected": {"sources": [source]}}]})
    # Tokens are bound to this pod; no node matches it, so nothing runs it but this test.
    held["spec"]["nodeSelector"] = {"kubetrain.dev/no-such-node": "true"}
    created = api_client.sanitize_for_serialization(await core.create_namespaced_pod(namespace, held))
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    reviews = client.AuthenticationV1Api(api_client)

    async def authenticated(token: str) -> bool:
        review = {"spec": {"token": token, "audiences": [audience]}}
        answer = await reviews.create_token_review(review)
        return bool(answer.status.authenticated)

    try:

        async def prepared() -> dict[str, Path] | None:
            # as the node retries: the namespace's kube-root-ca.crt (in the pod's default API access
            # volume) is published by the controller manager a moment after the namespace is made
            with contextlib.suppress(volumes.VolumeError):
                return await volumes.prepare(kube, created, tmp_path)
            return None

        token_file = (await eventually(prepared, timeout=30, what="the pod's volumes"))["token"] / "token"
        first = token_file.read_text()
        renewal = asyncio.create_task(volumes.keep_tokens_fresh(kube, created, tmp_path, after=lambda _: 1.1))
        try:

            async def new_token() -> str | None:
                current = token_file.read_text()
                return current if current != first else None

            renewed = await eventually(new_token, timeout=20, what="a new token")
            assert await authenticated(first) and await authenticated(renewed)
            # The pod is gone: no token is issued for it any more, and the last one stays in place.
            warned = len(caplog.records)
            await core.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
            await eventually(lambda: _gone(core, namespace, "holder"), timeout=30, what="the pod to go")

            async def refused() -> bool:  # renewals run one at a time: none that could succeed is left
                return any("keeping the current token" in r.getMessage() for r in caplog.records[warned:])

            await eventually(refused, timeout=20, what="a renewal refused for the deleted pod")
            last = token_file.read_text()
            await asyncio.sleep(3)
            assert token_file.read_text() == last and not renewal.done()
        finally:
            renewal.cancel()
    finally:
        await kube.close()


async def _gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    listed = await core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
    return not listed.items


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() != psutil.STATUS_ZOMBIE
    return False


def _processes_of(uid: str) -> list[psutil.Process]:
    """The processes running a pod's containers (each carries its pod's uid in its env)."""
    found = []
    for candidate in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if candidate.environ().get(containers.ENV_POD_UID) == uid and _alive(candidate):
                found.append(candidate)
    return found


async def test_a_node_killed_and_started_again_never_runs_a_container_twice(
    dev_cluster: DevCluster, core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    # Quiet training: the containers would outlive the killed node (a chatty one dies of a broken pipe).
    script = "import time; print('started', flush=True); time.sleep(600)"
    init = {"initContainers": [{"name": "prepare", "image": "sh", "command": ["sh", "-c", "echo prepared"]}]}
    await core.create_namespaced_pod(namespace, pod("again", script, restart="OnFailure", extra=init))
    await core.create_namespaced_pod(namespace, pod("once", script, restart="Never"))
    await core.create_namespaced_pod(namespace, pod("gone", script))
    await core.create_namespaced_pod(namespace, pod("finished", "print('done')"))
    await wait_phase(core, namespace, "finished", "Succeeded")
    before: dict[str, list[psutil.Process]] = {}
    for name in ("again", "once", "gone"):
        uid = (await wait_phase(core, namespace, name, "Running")).metadata.uid
        before[name] = await eventually(
            lambda uid=uid: asyncio.to_thread(_processes_of, uid), what=f"the process of {name}"
        )
    prepared = (await core.read_namespaced_pod("again", namespace)).status.init_container_statuses[0]
    state = dev_cluster.load_state()
    assert state is not None
    process.kill(state.pids["process-node"])  # as a crash or the OOM killer would
    assert all(_alive(p) for ps in before.values() for p in ps), "the containers died with the node"
    gone = (await core.read_namespaced_pod("gone", namespace)).metadata.uid
    await core.delete_namespaced_pod("gone", namespace)  # while the node is down: it stays, deleting
    await asyncio.to_thread(dev_cluster.restart, "process-node")

    assert not any(_alive(p) for ps in before.values() for p in ps), "a container outlived its node"

    async def restarted() -> client.V1ContainerStatus | None:
        status = (await core.read_namespaced_pod("again", namespace)).status.container_statuses[0]
        return status if status.restart_count == 1 and status.state.running else None

    again = await eventually(restarted, what="the OnFailure container to be restarted once")
    assert (again.last_state.terminated.exit_code, again.last_state.terminated.reason) == (255, "Unknown")
    # Its init container had succeeded: it is not run again (the API server would refuse its status
    # going from terminated back to running), and every run's log is still there.
    init_status = (await core.read_namespaced_pod("again", namespace)).status.init_container_statuses[0]
    assert init_status.state.terminated.started_at == prepared.state.terminated.started_at
    assert kubectl("logs", "again", "-n", namespace, "-c", "prepare").stdout == "prepared\n"
    assert kubectl("logs", "again", "-n", namespace, "--previous").stdout == "started\n"
    assert kubectl("logs", "finished", "-n", namespace).stdout == "done\n", "a finished pod's log was lost"
    uid = (await core.read_namespaced_pod("again", namespace)).metadata.uid
    assert len(await eventually(lambda: asyncio.to_thread(_processes_of, uid))) == 1
    once = await wait_phase(core, namespace, "once", "Failed")
    ended = once.status.container_statuses[0].state.terminated
    assert (ended.exit_code, ended.reason, once.status.container_statuses[0].restart_count) == (
        255,
        "Unknown",
        0,
    )
    assert not await asyncio.to_thread(_processes_of, once.metadata.uid)

    async def removed() -> bool:
        names = [p.metadata.name for p in (await core.list_namespaced_pod(namespace)).items]
        return "gone" not in names and not (dev_cluster.process_node_dir / "pods" / gone).exists()

    await eventually(removed, what="the pod deleted while the node was down to be removed, with its files")
    finished = (await core.read_namespaced_pod("finished", namespace)).metadata.uid
    assert (dev_cluster.process_node_dir / "pods" / finished).exists()
    await core.delete_namespaced_pod("finished", namespace)

    async def finished_forgotten() -> bool:
        return not (dev_cluster.process_node_dir / "pods" / finished).exists()

    await eventually(finished_forgotten, what="a finished pod's files to go with it")
