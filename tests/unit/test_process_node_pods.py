"""One pod on the process node, run by its worker against fakes of what it uses of the node
(``PodServices``): the restart policy and back-off, the reasons a container ended, the GPUs a pod asks
for, the status a new or carried-over pod reports, how a container is started (env, mounts, peers'
names, the confinement wrapper), and real processes run to their end or stopped by a deletion."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, cast

from kubetrain.devcluster.processnode import containers, network
from kubetrain.devcluster.processnode.gpus import GpuAllocator
from kubetrain.devcluster.processnode.pods import (
    BACKOFF_MAX,
    ContainerState,
    PodServices,
    PodWorker,
    back_off_seconds,
    gpus_requested,
    restart_wanted,
    termination_reason,
)
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import PODS, Resource

Obj = dict[str, Any]
PEER_ADDRESS = "127.1.9.9"


class FakeKube:
    """Records the status writes and deletions of pods; nothing else is asked of it here."""

    def __init__(self) -> None:
        self.statuses: list[Obj] = []
        self.deleted: list[tuple[Resource, str, str | None, Obj]] = []

    async def patch(self, resource: Resource, name: str, body: Obj, **options: Any) -> Obj:
        assert resource == PODS and options["subresource"] == "status"
        self.statuses.append(body["status"])
        return body

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, **options: Any
    ) -> None:
        self.deleted.append((resource, name, namespace, options))


def services(tmp_path: Path, kube: FakeKube | None = None, *, peers: list[Obj] | None = None) -> PodServices:
    """The node as a worker sees it: a peer pod behind the service ``job-master-0``, two GPUs, no port
    shim, and a confinement wrapper that names what it keeps."""
    (tmp_path / "work").mkdir(exist_ok=True)
    master = {"metadata": {"name": "job-master-0", "namespace": "ns"}, "spec": {"selector": {"app": "m"}}}

    async def lookup(kind: str, namespace: str, name: str) -> Obj | None:
        return None

    return PodServices(
        kube=cast(KubeClient, kube or FakeKube()),
        addresses=network.AddressPool(),
        gpus=GpuAllocator(["0", "1"]),
        resolver=network.Resolver(lambda: peers or [], lambda: [master], lambda pod: PEER_ADDRESS),
        lookup=lookup,
        pods_dir=tmp_path / "pods",
        workdir=tmp_path / "work",
        base_env=lambda home: {"PATH": "/usr/bin:/bin", "HOME": str(home)},
        netshim=None,
        confined=lambda keep: ["confine", *(str(path) for path in keep), "--"],
    )


def pod(*mains: Obj, restart_policy: str = "Never", inits: list[Obj] | None = None, **spec: Any) -> Obj:
    return {
        "metadata": {"name": "trainer", "namespace": "ns", "uid": "uid-1", "labels": {}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": list(mains),
            "initContainers": inits or [],
            **spec,
        },
    }


def container(name: str, *command: str, **spec: Any) -> Obj:
    return {"name": name, "image": "python", "command": list(command), **spec}


# -- pure decisions -------------------------------------------------------------------------------


def test_a_main_container_is_restarted_as_the_pod_s_restart_policy_says() -> None:
    assert [restart_wanted("Always", code) for code in (0, 1)] == [True, True]
    assert [restart_wanted("OnFailure", code) for code in (0, 2)] == [False, True]
    assert [restart_wanted("Never", code) for code in (0, 2)] == [False, False]


def test_the_back_off_starts_at_one_second_and_doubles_up_to_its_limit() -> None:
    assert [back_off_seconds(n) for n in range(7)] == [1, 2, 4, 8, 16, BACKOFF_MAX, BACKOFF_MAX]
    assert back_off_seconds(1000) == BACKOFF_MAX


def test_a_sigkill_nobody_asked_for_is_reported_as_the_oom_killer() -> None:
    assert termination_reason(0, signalled=False) == "Completed"
    assert termination_reason(137, signalled=False) == "OOMKilled"
    assert termination_reason(137, signalled=True) == "Error"  # the node stopped it
    assert termination_reason(1, signalled=False) == "Error"


def test_a_pod_asks_for_the_sum_over_its_containers_of_each_one_s_larger_limit_or_request() -> None:
    def gpus(**resources: Obj) -> Obj:
        return container("c", "true", resources=resources)

    assert (
        gpus_requested(pod(gpus(limits={"nvidia.com/gpu": 2}), gpus(requests={"nvidia.com/gpu": "1"}))) == 3
    )
    assert gpus_requested(pod(gpus(limits={"nvidia.com/gpu": 1}, requests={"nvidia.com/gpu": 2}))) == 2
    assert gpus_requested(pod(gpus(limits={"cpu": "1"}), container("plain", "true"))) == 0


# -- a worker on fake services ------------------------------------------------------------------


def test_a_new_pod_is_pending_with_its_address_and_every_container_being_created(tmp_path: Path) -> None:
    node = services(tmp_path)
    worker = PodWorker(node, pod(container("main", "true"), inits=[container("setup", "true")]))
    status = worker.status()
    assert worker.dir == tmp_path / "pods" / "uid-1"
    assert status["phase"] == "Pending" and status["podIP"] == node.addresses.get("uid-1") == worker.address
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}
    assert conditions == {
        "PodScheduled": ("True", None),
        "Initialized": ("False", "ContainersNotInitialized"),
        "ContainersReady": ("False", "ContainersNotReady"),
        "Ready": ("False", "ContainersNotReady"),
    }
    for statuses in (status["containerStatuses"], status["initContainerStatuses"]):
        assert [s["state"] for s in statuses] == [{"waiting": {"reason": "ContainerCreating"}}]


def test_a_pod_an_earlier_run_of_the_node_ran_goes_on_with_its_init_containers_done(tmp_path: Path) -> None:
    before = {
        "phase": "Running",
        "startTime": "2024-01-01T00:00:00Z",
        "containerStatuses": [
            {"name": "main", "restartCount": 2, "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}}
        ],
    }
    worker = PodWorker(services(tmp_path), {**pod(container("main", "true")), "status": before})
    status = worker.status()
    assert worker.carried and status["phase"] == "Running" and status["startTime"] == "2024-01-01T00:00:00Z"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Initialized"] == "True"
    (main,) = status["containerStatuses"]
    assert main["restartCount"] == 2
    assert main["state"]["terminated"]["exitCode"] == containers.UNKNOWN_EXIT_CODE


def test_a_container_starts_with_the_node_s_env_its_mounts_mapped_and_the_wrapper_keeping_its_files(
    tmp_path: Path,
) -> None:
    claim = tmp_path / "claims" / "data"
    spec = container(
        "main",
        "/data/train.py",
        "--master=job-master-0:29500",
        workingDir="/data/run",
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    peer = {"metadata": {"name": "m", "namespace": "ns", "labels": {"app": "m"}}, "spec": {}}
    worker = PodWorker(
        services(tmp_path, peers=[peer]),
        pod(spec, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
    )
    worker._mount_table({"data": claim})
    worker.gpus = ["1"]
    state = worker.mains[0]
    run = worker._build_run(spec, state, {"OUT": "/data/out", "MASTER": "job-master-0"}, spec["command"])
    assert run.argv == [f"{claim}/train.py", f"--master={PEER_ADDRESS}:29500"]
    assert run.cwd == claim / "run"
    assert run.env["HOME"] == str(worker.dir) and run.env["PATH"] == "/usr/bin:/bin"
    assert run.env["OUT"] == f"{claim}/out" and run.env["MASTER"] == PEER_ADDRESS
    assert run.env["CUDA_VISIBLE_DEVICES"] == "1" and run.env["KUBETRAIN_POD_NAME"] == "trainer"
    assert run.env[containers.ENV_POD_UID] == "uid-1" and "LD_PRELOAD" not in run.env  # no port shim
    assert run.wrapper == ["confine", str(worker.dir), str(claim), "--"]
    assert run.log_path == containers.log_dir(worker.dir, "main") / "0.log"
    plain = container("plain", "python")
    assert worker._build_run(plain, ContainerState("plain", ""), {}, ["python"]).cwd == tmp_path / "work"


def unconfined(tmp_path: Path, kube: FakeKube) -> PodServices:
    """A node on a host that does not let it hide the state dir: containers start as they are."""
    return dataclasses.replace(services(tmp_path, kube), confined=lambda keep: [])


async def until(condition: Any, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_failing_container_fails_the_pod_with_its_exit_code_and_termination_message(
    tmp_path: Path,
) -> None:
    kube = FakeKube()
    node = unconfined(tmp_path, kube)
    script = 'echo "bad input" > "$KUBETRAIN_TERMINATION_MESSAGE_PATH"; exit 3'
    worker = PodWorker(
        node, pod(container("main", "sh", "-c", script, resources={"limits": {"nvidia.com/gpu": 1}}))
    )
    worker.start()
    await until(lambda: bool(kube.statuses) and kube.statuses[-1]["phase"] == "Failed")
    (main,) = kube.statuses[-1]["containerStatuses"]
    terminated = main["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        3,
        "Error",
        "bad input\n",
    )
    assert worker.gpus == ["0"] and node.gpus.allocate("other", 2) == ["0", "1"]  # given back at the end
    worker.close()
    assert not worker.dir.exists() and node.addresses.get("uid-1") is None


async def test_deleting_a_pod_stops_its_process_reports_it_and_removes_the_pod_object(tmp_path: Path) -> None:
    kube = FakeKube()
    worker = PodWorker(
        unconfined(tmp_path, kube), pod(container("main", "sleep", "60"), restart_policy="Always")
    )
    worker.start()
    await until(
        lambda: bool(kube.statuses) and "running" in kube.statuses[-1]["containerStatuses"][0]["state"]
    )
    await worker.terminate(5)
    terminated = kube.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (143, "Error")  # SIGTERM
    assert kube.deleted == [(PODS, "trainer", "ns", {"uid": "uid-1", "grace_period_seconds": 0})]
    assert worker.mains[0].restarts == 0 and not worker.dir.exists()
