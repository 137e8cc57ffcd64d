"""One pod on the process node, from admission to deletion, as a kubelet would run it.

Admission gives the pod an address and its volumes; init containers run one
after the other; then the main containers run together, each restarted as the
pod's ``restartPolicy`` says (with a back-off that starts at one second, faster
than a kubelet's ten, because this node exists for development). The pod's
status (phase, conditions, container states with ``lastState``, exit codes,
restart counts, IPs, start times, termination messages) is written back after
every change. Deleting the pod stops its processes within the grace period,
then removes the pod object. A pod that an earlier run of the node ran is taken
over as a kubelet takes its pods over after a reboot (``carried_over``).

A worker sees of its node only ``PodServices``: the API, the node's addresses, GPUs and names, and
how a container starts there; the agent builds them, tests give fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain import naming
from kubetrain.devcluster.processnode import containers, env, isolation, network, volumes
from kubetrain.devcluster.processnode.gpus import GpuAllocator
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import PODS

log = logging.getLogger(__name__)
Obj = dict[str, Any]

MAX_TERMINATION_MESSAGE = 4096
FALLBACK_LOG_LINES = 80
BACKOFF_START, BACKOFF_MAX = 1.0, 30.0
PEER_WAIT = 600.0  # how long a container waits for its peers' names to resolve


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PodServices:
    """What a pod worker uses of its node, and nothing more."""

    kube: KubeClient  # the pod's volumes, its status and its removal
    addresses: network.AddressPool  # the pod's IP
    gpus: GpuAllocator  # the pod's devices
    resolver: network.Resolver  # its peers' names, as DNS would answer them
    lookup: env.Lookup  # the ConfigMaps and Secrets its env refers to
    pods_dir: Path  # each pod's files are in <pods_dir>/<uid>
    workdir: Path  # where a container without a workingDir starts
    base_env: Callable[[Path], dict[str, str]]  # the env every container starts from, given its HOME
    netshim: Path | None  # the port isolation library (None: not built on this host)
    confined: Callable[[list[Path]], list[str]]  # what a container starts through, given what it keeps


@dataclass
class ContainerState:
    """What the status reports about one container."""

    name: str
    image: str
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    restarts: int = 0
    ready: bool = False
    started: bool = False
    runs: list[containers.Run] = field(default_factory=list)
    ended_before: Obj | None = None  # how it ended in an earlier run of the node (its ``terminated``)

    def status(self) -> Obj:
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": f"process://{self.name}",
            "state": self.state,
            "lastState": self.last_state,
            "restartCount": self.restarts,
            "ready": self.ready,
            "started": self.started,
        }


class PodWorker:
    def __init__(self, services: PodServices, pod: Obj) -> None:
        self.services = services
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = services.pods_dir / self.uid
        self.address = services.addresses.acquire(self.uid)
        spec = pod["spec"]
        self.restart_policy = spec.get("restartPolicy") or "Always"
        self.inits = [ContainerState(c["name"], c.get("image", "")) for c in spec.get("initContainers") or []]
        self.mains = [ContainerState(c["name"], c.get("image", "")) for c in spec.get("containers") or []]
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.start_time = _now()
        self.conditions: dict[str, Obj] = {}
        self.deleting = asyncio.Event()
        self.carried = False  # taken over from an earlier run of the node: its init containers are done
        self.grace = 30.0  # the grace period of the deletion, once there is one
        self.gpus: list[str] = []
        self.mounts: dict[str, list[tuple[str, str]]] = {}
        self.claim_dirs: list[Path] = []  # the host directories of the pod's claims
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._set_condition("PodScheduled", True)
        for kind in ("Initialized", "ContainersReady", "Ready"):
            self._set_condition(
                kind, False, "ContainersNotInitialized" if kind == "Initialized" else "ContainersNotReady"
            )
        self._carry_over(pod.get("status") or {})

    def _carry_over(self, status: Obj) -> None:
        """Take over a pod that an earlier run of this node ran (see ``carried_over``): its init
        containers had all succeeded, and its containers' earlier runs keep their logs."""
        if status.get("phase") != "Running":
            return
        self.carried = True
        self.phase = "Running"
        self.start_time = status.get("startTime") or self.start_time
        self._set_condition("Initialized", True)
        for states, statuses in (
            (self.inits, status.get("initContainerStatuses")),
            (self.mains, status.get("containerStatuses")),
        ):
            before = {seen["name"]: seen for seen in statuses or []}
            for state, (restarts, ended) in zip(states, carried_over(states, before), strict=True):
                state.restarts, state.ended_before = restarts, ended
                state.last_state = (before.get(state.name) or {}).get("lastState") or {}
                state.runs = containers.earlier_runs(containers.log_dir(self.dir, state.name))
                if ended is not None:
                    state.state = {"terminated": ended}

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._writer = asyncio.create_task(self._status_writer(), name=f"status:{self.name}")
        self._task = asyncio.create_task(self._run(), name=f"pod:{self.name}")

    def update(self, pod: Obj) -> None:
        self.pod = pod

    def container(self, name: str) -> ContainerState | None:
        return next((c for c in [*self.mains, *self.inits] if c.name == name), None)

    async def _run(self) -> None:
        try:
            self._changed()
            host_dirs = await self._prepare_volumes()
            if host_dirs is None:
                return
            renewal = asyncio.create_task(volumes.keep_tokens_fresh(self.services.kube, self.pod, self.dir))
            try:
                await self._run_containers(host_dirs)
            finally:
                renewal.cancel()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("pod %s/%s failed on the process node", self.namespace, self.name)
            self.phase, self.reason, self.message = "Failed", "ProcessNodeError", str(exc)
            self._changed()

    async def _run_containers(self, host_dirs: dict[str, Path]) -> None:
        self._mount_table(host_dirs)
        self.gpus = self.services.gpus.allocate(self.uid, gpus_requested(self.pod))
        for spec, state in zip(self.pod["spec"].get("initContainers") or [], self.inits, strict=True):
            if not self.carried and not await self._run_init(spec, state):
                return
        self._set_condition("Initialized", True)
        self.phase = "Running" if not self.deleting.is_set() else self.phase
        await asyncio.gather(
            *(
                self._supervise(spec, state)
                for spec, state in zip(self.pod["spec"].get("containers") or [], self.mains, strict=True)
            )
        )
        self._finish()

    async def _prepare_volumes(self) -> dict[str, Path] | None:
        while not self.deleting.is_set():
            try:
                return await volumes.prepare(self.services.kube, self.pod, self.dir)
            except (volumes.VolumeError, errors.APIError) as exc:
                # Like kubelet's volume manager, retry until the pod goes away: right
                # after binding, the node authorizer may not yet know the pod's
                # claims and secrets (403), and claims may still be unbound.
                for state in self.mains:
                    if state.ended_before is None:  # how a carried-over container ended stays on record
                        state.state = {"waiting": {"reason": "ContainerCreating", "message": str(exc)}}
                self._changed()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.deleting.wait(), 2)
        return None

    def _mount_table(self, host_dirs: dict[str, Path]) -> None:
        claims = [v["name"] for v in self.pod["spec"].get("volumes") or [] if "persistentVolumeClaim" in v]
        self.claim_dirs = [host_dirs[name] for name in claims if name in host_dirs]
        for spec in [
            *(self.pod["spec"].get("initContainers") or []),
            *(self.pod["spec"].get("containers") or []),
        ]:
            self.mounts[spec["name"]] = [
                (m["mountPath"], str(host_dirs[m["name"]] / m.get("subPath", "")).rstrip("/"))
                for m in spec.get("volumeMounts") or []
                if m["name"] in host_dirs
            ]

    async def _run_init(self, spec: Obj, state: ContainerState) -> bool:
        while not self.deleting.is_set():
            code = await self._run_once(spec, state)
            if code is None:
                return False
            if code == 0:
                return True
            if self.restart_policy == "Never":
                self.phase, self.reason = "Failed", "InitContainerFailed"
                self._set_condition("Initialized", False, "PodFailed")
                self._changed()
                return False
            await self._back_off(state)
        return False

    async def _supervise(self, spec: Obj, state: ContainerState) -> None:
        while not self.deleting.is_set():
            if state.ended_before is not None:  # it ended in the node's earlier run: go on from there
                code: int | None = int(state.ended_before.get("exitCode", containers.UNKNOWN_EXIT_CODE))
                state.ended_before = None
            else:
                code = await self._run_once(spec, state)
            if code is None or self.deleting.is_set():
                return
            if restart_wanted(self.restart_policy, code):
                await self._back_off(state)
                continue
            return

    async def _back_off(self, state: ContainerState) -> None:
        delay = back_off_seconds(state.restarts)
        state.last_state, state.restarts = state.state, state.restarts + 1
        state.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:.0f}s restarting failed container {state.name}",
            }
        }
        state.ready = False
        self._refresh_readiness()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.deleting.wait(), delay)

    async def _run_once(self, spec: Obj, state: ContainerState) -> int | None:
        """Start the container and wait for it to end; None when it could not start before deletion."""
        run = await self._prepare_run(spec, state)
        if run is None or self.deleting.is_set():
            return None  # the pod is being deleted: a restart must not outlive it
        try:
            await run.start()
        except OSError as exc:
            state.state = {
                "waiting": {"reason": "RunContainerError", "message": f"cannot start {run.argv[0]!r}: {exc}"}
            }
            self._changed()
            await asyncio.sleep(BACKOFF_START)
            state.state = {
                "terminated": {
                    "exitCode": 127,
                    "reason": "ContainerCannotRun",
                    "message": str(exc),
                    "startedAt": _now(),
                    "finishedAt": _now(),
                }
            }
            return 127
        state.runs.append(run)
        if self.deleting.is_set():  # deleted while it started: ``terminate`` may have missed it
            await run.stop(self.grace)
            return None
        state.state, state.started, state.ready = {"running": {"startedAt": run.started_at}}, True, True
        self._refresh_readiness()
        if self.phase == "Pending" and spec in (self.pod["spec"].get("containers") or []):
            self.phase = "Running"
        self._changed()
        code = await run.wait()
        message = self._termination_message(spec, state, run, code)
        reason = termination_reason(code, signalled=run.signalled)
        state.state = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": run.started_at,
                "finishedAt": run.finished_at,
                **({"message": message} if message else {}),
            }
        }
        state.ready, state.started = False, False
        self._refresh_readiness()
        return code

    async def _prepare_run(self, spec: Obj, state: ContainerState) -> containers.Run | None:
        """Build argv, env and cwd; wait until the container's peers resolve (like DNS retries)."""
        if not spec.get("command") and not spec.get("args"):
            state.state = {
                "waiting": {
                    "reason": "CreateContainerConfigError",
                    "message": (
                        "the process node runs containers as host processes and cannot use an image's entrypoint: "
                        "set command (and args) on this container"
                    ),
                }
            }
            self._changed()
            await self.deleting.wait()
            return None
        deadline = asyncio.get_running_loop().time() + PEER_WAIT
        while not self.deleting.is_set():
            try:
                values = await env.container_env(self._with_addresses(), spec, self.services.lookup)
            except (env.EnvError, errors.APIError) as exc:
                state.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self._changed()
                await asyncio.sleep(2)
                continue
            argv = [env.expand(a, values) for a in [*(spec.get("command") or []), *(spec.get("args") or [])]]
            pending = [
                n
                for text in [*values.values(), *argv[1:]]
                for n in self.services.resolver.waiting_for(text, self.namespace, self._jobs())
            ]
            if not pending or asyncio.get_running_loop().time() > deadline:
                return self._build_run(spec, state, values, argv)
            state.state = {
                "waiting": {
                    "reason": "ContainerCreating",
                    "message": f"waiting for {sorted(set(pending))[0]} to have a pod",
                }
            }
            self._changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.deleting.wait(), 0.5)
        return None

    def _jobs(self) -> list[str]:
        """The training job this pod belongs to (v1 job or TrainJob), whose peers it will look up."""
        labels = self.pod["metadata"].get("labels") or {}
        return [labels[k] for k in (naming.LABEL_JOB_NAME, naming.JOBSET_NAME) if k in labels]

    def _with_addresses(self) -> Obj:
        """The pod as its env sees it: with the IPs this node gave it, even before the status says so."""
        addresses = {
            "podIP": self.address,
            "podIPs": [{"ip": self.address}],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
        }
        return {**self.pod, "status": {**(self.pod.get("status") or {}), **addresses}}

    def _build_run(
        self, spec: Obj, state: ContainerState, values: dict[str, str], argv: list[str]
    ) -> containers.Run:
        mounts = self.mounts.get(spec["name"], [])
        workdir = Path(network.map_paths(spec.get("workingDir") or "", mounts) or self.services.workdir)
        files = containers.container_dir(self.dir, spec["name"])
        files.mkdir(parents=True, exist_ok=True)
        termination_log = files / "termination-log"
        termination_log.write_text("")
        process_env = self.services.base_env(self.dir)
        process_env.update(
            {
                "HOSTNAME": self.pod["spec"].get("hostname") or self.name,
                "KUBETRAIN_TERMINATION_MESSAGE_PATH": str(termination_log),
                "KUBETRAIN_POD_NAME": self.name,
                "KUBETRAIN_POD_NAMESPACE": self.namespace,
                containers.ENV_POD_UID: self.uid,
            }
        )
        if self.gpus:
            process_env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        for name, value in values.items():
            process_env[name] = self._rewrite(value, mounts)
        process_env.update(
            isolation.env(
                self.services.netshim, self.address, self.dir / "ports", process_env.get("LD_PRELOAD", "")
            )
        )
        # The program itself is a file, never a host name (a TrainJob named like its command: `tune`).
        argv = [
            network.map_paths(a, mounts) if i == 0 else self._rewrite(a, mounts) for i, a in enumerate(argv)
        ]
        log_path = containers.log_dir(self.dir, spec["name"]) / f"{state.restarts}.log"
        return containers.Run(
            argv=argv,
            env=process_env,
            cwd=workdir,
            log_path=log_path,
            wrapper=self.services.confined(self._kept()),
        )

    def _kept(self) -> list[Path]:
        """What a container of this pod sees of the hidden state dir: the pod's own files, its claims'
        volumes, the port shim; not another pod's files, nor a hostPath into the state dir."""
        return [self.dir, *([self.services.netshim] if self.services.netshim else []), *self.claim_dirs]

    def _rewrite(self, text: str, mounts: list[tuple[str, str]]) -> str:
        rewritten, _ = self.services.resolver.rewrite(text, self.namespace)
        return network.map_paths(rewritten, mounts)

    def _termination_message(self, spec: Obj, state: ContainerState, run: containers.Run, code: int) -> str:
        path = containers.container_dir(self.dir, spec["name"]) / "termination-log"
        try:
            message = path.read_text(errors="replace")[:MAX_TERMINATION_MESSAGE]
        except OSError:
            message = ""
        if not message and code != 0 and spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = containers.read_log(run.log_path, tail=FALLBACK_LOG_LINES)
            message = "\n".join(lines)[-2048:]
        return network.unmap_paths(message, self.mounts.get(spec["name"], []))

    def _finish(self) -> None:
        if self.deleting.is_set() or self.phase == "Failed":
            self._changed()
            return
        codes = [c.state.get("terminated", {}).get("exitCode") for c in self.mains]
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        reason = "PodCompleted" if self.phase == "Succeeded" else "PodFailed"
        for kind in ("ContainersReady", "Ready"):
            self._set_condition(kind, False, reason)
        self.services.gpus.release(self.uid)
        self._changed()

    # -- deletion --------------------------------------------------------------------------------
    async def terminate(self, grace: float) -> None:
        """Stop every process within ``grace`` seconds, report it, then remove the pod object."""
        if self.deleting.is_set():
            return
        self.deleting.set()
        self.grace = grace
        runs = [c.runs[-1] for c in [*self.inits, *self.mains] if c.runs]
        await asyncio.gather(*(run.stop(grace) for run in runs))
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 5)
        # A container restarted in place while the others stopped: no process outlives its pod.
        late = [c.runs[-1] for c in [*self.inits, *self.mains] if c.runs and c.runs[-1] not in runs]
        await asyncio.gather(*(run.stop(0) for run in late))
        for state in self.mains:
            if "running" in state.state or "waiting" in state.state:
                code = (
                    state.runs[-1].exit_code if state.runs and state.runs[-1].exit_code is not None else 137
                )
                state.state = {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Error" if code else "Completed",
                        "finishedAt": _now(),
                    }
                }
        await self._write_status()
        try:
            await self.services.kube.delete(
                PODS, self.name, self.namespace, uid=self.uid, grace_period_seconds=0
            )
        except errors.APIError as exc:
            log.warning("could not remove pod %s/%s: %s", self.namespace, self.name, exc)
        self.close()

    def close(self) -> None:
        """Forget the pod: release its address and GPUs, remove its files, stop its tasks."""
        for task in (self._task, self._writer):
            if task is not None and not task.done():
                task.cancel()
        self.services.addresses.release(self.uid)
        self.services.gpus.release(self.uid)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- status ----------------------------------------------------------------------------------
    def _set_condition(self, kind: str, true: bool, reason: str | None = None) -> None:
        current = self.conditions.get(kind)
        status = "True" if true else "False"
        if current is not None and current["status"] == status:
            return
        self.conditions[kind] = {
            "type": kind,
            "status": status,
            "lastTransitionTime": _now(),
            **({"reason": reason} if reason else {}),
        }

    def _refresh_readiness(self) -> None:
        ready = bool(self.mains) and all(c.ready for c in self.mains)
        self._set_condition("ContainersReady", ready, None if ready else "ContainersNotReady")
        self._set_condition("Ready", ready, None if ready else "ContainersNotReady")
        self._changed()

    def _changed(self) -> None:
        self._dirty.set()

    def status(self) -> Obj:
        status: Obj = {
            "phase": self.phase,
            "conditions": list(self.conditions.values()),
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.address,
            "podIPs": [{"ip": self.address}],
            "startTime": self.start_time,
            "containerStatuses": [c.status() for c in self.mains],
        }  # no qosClass: the API server sets it at creation from the resources, and it is immutable
        if self.inits:
            status["initContainerStatuses"] = [c.status() for c in self.inits]
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        return status

    async def _write_status(self) -> None:
        with contextlib.suppress(errors.APINotFoundError):
            await self.services.kube.patch(
                PODS, self.name, {"status": self.status()}, namespace=self.namespace, subresource="status"
            )

    async def _status_writer(self) -> None:
        while True:
            await self._dirty.wait()
            await asyncio.sleep(0.05)  # let a burst of changes settle into one write
            self._dirty.clear()
            try:
                await self._write_status()
            except errors.APIError as exc:
                log.warning("status of %s/%s not written: %s", self.namespace, self.name, exc)
                self._dirty.set()
                await asyncio.sleep(1)


def carried_over(states: list[ContainerState], before: dict[str, Obj]) -> list[tuple[int, Obj | None]]:
    """Each container's restart count and how it ended (None: it had not started), from ``before``, its
    status by name in a pod that an earlier run of this node ran; the node was restarted or killed, and
    its processes are gone (``containers.stop_leftovers``). As a kubelet after a reboot: a container
    that was running ended ``Unknown`` with exit code 255, one that had ended keeps how it ended; the
    restart policy then restarts them (each restart counted) or ends the pod."""
    carried: list[tuple[int, Obj | None]] = []
    for state in states:
        seen = before.get(state.name) or {}
        was = seen.get("state") or {}
        ended = was.get("terminated")
        if "running" in was:
            ended = {
                "exitCode": containers.UNKNOWN_EXIT_CODE,
                "reason": "Unknown",
                "message": "the process node restarted while the container ran",
                "startedAt": was["running"].get("startedAt"),
                "finishedAt": _now(),
            }
        carried.append((int(seen.get("restartCount") or 0), ended))
    return carried


def restart_wanted(policy: str, code: int) -> bool:
    """Whether a main container that ended with ``code`` is started again under the pod's
    ``restartPolicy``."""
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def back_off_seconds(restarts: int) -> float:
    """How long a container waits before its next start, having restarted ``restarts`` times: from
    one second, doubling, at most ``BACKOFF_MAX``."""
    return float(min(BACKOFF_START * 2 ** min(restarts, 8), BACKOFF_MAX))


def termination_reason(code: int, *, signalled: bool) -> str:
    """The reason a container's ``terminated`` state gives: an unasked-for SIGKILL (137) is taken for
    the OOM killer, as a kubelet reports it."""
    if code == 0:
        return "Completed"
    return "OOMKilled" if code == 137 and not signalled else "Error"


def gpus_requested(pod: Obj) -> int:
    """The GPUs the pod's containers ask for (each its limit or request, whichever is larger)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        values = [(resources.get(k) or {}).get("nvidia.com/gpu") for k in ("limits", "requests")]
        total += max((int(str(v)) for v in values if v is not None), default=0)
    return total
