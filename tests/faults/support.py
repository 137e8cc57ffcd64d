"""What the fault suite shares: a controller process to kill, a recorder of every pod ever created, and
a mix of jobs that each know how they must end.

The suite's verdicts come from the API server's own history, not from the controller's logs: a watch
on the namespace's pods records every pod that ever existed, so a duplicate (two live pods for one slot),
a pod created more often than the job's restarts explain, or a pod left running by a failed job shows up
whatever the controller believes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch

from kubetrain import naming
from kubetrain.controller.v1 import frameworks
from tests.support import (
    HANG,
    Jobs,
    fails,
    runs_for,
    start_controller_process,
    training_runtime,
    trainjob,
)

SCALE = float(os.environ.get("FAULTS_SCALE", "1"))


def scaled(count: int) -> int:
    """A size of the suite, multiplied by ``FAULTS_SCALE`` (default 1: what ``make test`` runs)."""
    return max(1, round(count * SCALE))


class ControllerProcess:
    """``kubetrain controller run`` for one namespace, as a process the test can kill and restart."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, *args: str) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log = log
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self.exits: list[int] = []

    def start(self) -> None:
        self.proc = start_controller_process(self.kubeconfig, self.namespace, self.log, *self.args)
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, whatever was in flight is cut off."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def stop(self) -> int | None:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    async def supervise(self, done: asyncio.Event) -> None:
        """Until ``done``: start the process again whenever it exits, as a Deployment would.
        ``exits`` records each exit code (a controller that lost its lease exits 1 by design)."""
        while not done.is_set():
            if self.proc is not None and self.proc.poll() is not None:
                self.exits.append(self.proc.returncode)
                self.start()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.5)


async def kill_storm(
    controller: ControllerProcess, done: asyncio.Event, *, every: tuple[float, float], seed: int = 1
) -> None:
    """Until ``done``: let the controller run a random while, SIGKILL it, start it again at once."""
    import random

    rng = random.Random(seed)
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), rng.uniform(*every))
        if done.is_set():
            return
        controller.kill()
        controller.start()


# -- the pods' history -------------------------------------------------------------------------------
Slot = tuple[str, ...]


def slot_of(pod: client.V1Pod) -> Slot | None:
    """The replica a pod stands for: at most one live pod may hold it at any moment."""
    labels = pod.metadata.labels or {}
    if naming.LABEL_JOB_NAME in labels:
        return (
            labels[naming.LABEL_JOB_NAME],
            labels.get(naming.LABEL_REPLICA_TYPE, ""),
            labels.get(naming.LABEL_REPLICA_INDEX, ""),
        )
    if naming.JOBSET_NAME in labels:
        return (
            labels[naming.JOBSET_NAME],
            labels.get(naming.JOBSET_REPLICATED_JOB, ""),
            labels.get(naming.JOBSET_JOB_INDEX, ""),
            labels.get(naming.JOB_COMPLETION_INDEX, ""),
            labels.get(naming.JOBSET_RESTART_ATTEMPT, ""),
        )
    return None


def is_live(pod: client.V1Pod) -> bool:
    """Running or about to: not terminal, not being deleted."""
    return pod.metadata.deletion_timestamp is None and (pod.status.phase or "Pending") in (
        "Pending",
        "Running",
    )


def _leftover(kind: str, obj: Any) -> str:
    """An object left after its job was deleted, with what tells why it stays."""
    meta, spec, status = obj.metadata, getattr(obj, "spec", None), getattr(obj, "status", None)
    return (
        f"{kind} {meta.name} (owners {[r.name for r in meta.owner_references or []]}, "
        f"created {meta.creation_timestamp}, deleting since {meta.deletion_timestamp}, "
        f"finalizers {meta.finalizers}, node {getattr(spec, 'node_name', None)}, "
        f"phase {getattr(status, 'phase', None)})"
    )


@dataclass
class PodHistory:
    """Every pod event of a namespace, in the API server's order, from before the first job exists."""

    core: client.CoreV1Api
    namespace: str
    created: dict[str, list[str]] = field(default_factory=dict)  # slot job name -> uids, in order
    slot_uids: dict[Slot, list[str]] = field(default_factory=dict)
    live: dict[Slot, set[str]] = field(default_factory=dict)
    overlaps: list[tuple[Slot, set[str]]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # uid -> name
    current: dict[str, client.V1Pod] = field(default_factory=dict)
    relists: int = 0
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.core.list_namespaced_pod(self.namespace)
        for pod in listed.items:
            self._apply("ADDED", pod)
        self._task = asyncio.create_task(self._watch(listed.metadata.resource_version))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self, version: str) -> None:
        """Watch from ``version`` for good: through API server restarts (wait and watch again) and
        410s (list, and record what changed in the gap; ``relists`` counts them)."""
        while True:
            stream = watch.Watch()
            try:
                async for event in stream.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=300,
                ):
                    if event["type"] == "ERROR":
                        raise client.ApiException(status=410)
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    self._apply(event["type"], pod)
            except client.ApiException as exc:
                if exc.status != 410:
                    await asyncio.sleep(1)
                    continue
                version = await self._relist()
            except (aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(1)  # the API server is away; watch again when it is back
            finally:
                await stream.close()

    async def _relist(self) -> str:
        while True:
            try:
                listed = await self.core.list_namespaced_pod(self.namespace)
                break
            except (client.ApiException, aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(1)
        self.relists += 1
        seen = {pod.metadata.uid for pod in listed.items}
        for uid, pod in list(self.current.items()):
            if uid not in seen:
                self._apply("DELETED", pod)
        for pod in listed.items:
            self._apply("MODIFIED", pod)
        return str(listed.metadata.resource_version)

    def _apply(self, kind: str, pod: client.V1Pod) -> None:
        slot = slot_of(pod)
        uid = pod.metadata.uid
        if slot is None:
            return
        if uid not in self.names:
            self.names[uid] = pod.metadata.name
            self.slot_uids.setdefault(slot, []).append(uid)
            self.created.setdefault(slot[0], []).append(uid)
        if kind == "DELETED":
            self.current.pop(uid, None)
        else:
            self.current[uid] = pod
        holders = self.live.setdefault(slot, set())
        if kind != "DELETED" and is_live(pod):
            holders.add(uid)
        else:
            holders.discard(uid)
        if len(holders) > 1:
            self.overlaps.append((slot, set(holders)))

    def creations(self, job: str) -> int:
        return len(self.created.get(job, []))

    def slot_creations(self, job: str) -> dict[Slot, int]:
        return {s: len(u) for s, u in self.slot_uids.items() if s[0] == job}

    def live_pods(self, job: str) -> list[str]:
        return sorted(
            self.names[uid]
            for uid, pod in self.current.items()
            if (slot_of(pod) or ("",))[0] == job and is_live(pod)
        )


# -- the jobs --------------------------------------------------------------------------------------
def v1job(
    kind: str,
    name: str,
    replicas: dict[str, tuple[int, dict[str, str]]],
    *,
    restart_policy: str = "OnFailure",
    run_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job of any v1 kind whose simulated pods behave as each replica type's annotations say."""
    framework = frameworks.by_name(kind)
    specs = {
        rtype: {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {
                "metadata": {"annotations": dict(annotations)},
                "spec": {
                    "containers": [{"name": framework.api.default_container, "image": "example.com/t:1"}]
                },
            },
        }
        for rtype, (count, annotations) in replicas.items()
    }
    spec: dict[str, Any] = {framework.api.replica_field: specs}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


@dataclass(frozen=True)
class Outcome:
    """How a job must end: a condition and reason, or deleted (TTL)."""

    condition: str | None  # None: the job is deleted by its TTL
    reason: str = ""


@dataclass
class Scenario:
    """One kind of job in the mix: how to make it, how it must end, what else must hold at the end."""

    prefix: str
    kind: str
    make: Callable[[str], dict[str, Any]]
    outcome: Outcome
    check: Callable[[dict[str, Any] | None, PodHistory, str], list[str]] = lambda job, history, name: []
    runtime: dict[str, Any] | None = None  # a TrainingRuntime the scenario needs
    act: Callable[[Jobs, str], Any] | None = None  # what the test does to the job while it runs


def _restart_count(expected: int) -> Callable[[dict[str, Any] | None, PodHistory, str], list[str]]:
    def check(job: dict[str, Any] | None, history: PodHistory, name: str) -> list[str]:
        got = ((job or {}).get("status") or {}).get("restartCount")
        return [] if got == expected else [f"{name}: restartCount {got}, expected exactly {expected}"]

    return check


def _created(per_slot: dict[str, int]) -> Callable[[dict[str, Any] | None, PodHistory, str], list[str]]:
    """Each slot (by replica type / replicated job) was created exactly so many times."""

    def check(job: dict[str, Any] | None, history: PodHistory, name: str) -> list[str]:
        problems = []
        for slot, count in history.slot_creations(name).items():
            want = per_slot.get(slot[1], 1)
            if count != want:
                problems.append(f"{name}: slot {slot} created {count} times, expected {want}")
        return problems

    return check


def _all(*checks: Callable[[dict[str, Any] | None, PodHistory, str], list[str]]) -> Any:
    def check(job: dict[str, Any] | None, history: PodHistory, name: str) -> list[str]:
        return [p for c in checks for p in c(job, history, name)]

    return check


async def persistently(call: Callable[[], Awaitable[object]]) -> None:
    """Make a call the way a user or a kubelet would: again after a while when the API server is away."""
    while True:
        try:
            await call()
            return
        except (aiohttp.ClientError, OSError) as exc:
            print(f"retrying after {exc}")
        except client.ApiException as exc:
            if exc.status < 500 and exc.status != 429:
                raise
        await asyncio.sleep(1)


async def _unsuspend_later(jobs: Jobs, name: str) -> None:
    await asyncio.sleep(6)
    await persistently(lambda: jobs.patch(name, {"spec": {"runPolicy": {"suspend": False}}}))


async def _act_as_kubelet_restarting_the_worker(jobs: Jobs, name: str) -> None:
    """What a kubelet reports when it restarts the worker's container in place twice, then the master
    completes (kwok leaves hanging pods alone, so the test plays the kubelet)."""
    worker = f"{name}-worker-0"
    for count in (1, 2):
        await _until_running(jobs, worker)
        status = {"containerStatuses": [_container("pytorch", count, running=True)]}
        await persistently(lambda s=status: jobs.set_pod_status(worker, s))
        await asyncio.sleep(1)
    master = f"{name}-master-0"
    await _until_running(jobs, master)
    done = {"phase": "Succeeded", "containerStatuses": [_container("pytorch", 0, running=False)]}
    await persistently(lambda: jobs.set_pod_status(master, done))


async def _until_running(jobs: Jobs, pod: str) -> None:
    while True:
        with contextlib.suppress(client.ApiException, aiohttp.ClientError, OSError):
            found = await jobs.core.read_namespaced_pod(pod, jobs.namespace)
            if found.status.phase == "Running" and not found.metadata.deletion_timestamp:
                return
        await asyncio.sleep(0.5)


def _container(name: str, restarts: int, *, running: bool) -> dict[str, Any]:
    state: dict[str, Any] = (
        {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        if running
        else {"terminated": {"exitCode": 0, "reason": "Completed"}}
    )
    return {
        "name": name,
        "image": "example.com/t:1",
        "imageID": "",
        "ready": running,
        "restartCount": restarts,
        "started": running,
        "state": state,
        **({"lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}} if restarts else {}),
    }


def _no_live_pods(job: dict[str, Any] | None, history: PodHistory, name: str) -> list[str]:
    live = history.live_pods(name)
    return [f"{name}: failed, but pods still run: {live}"] if live else []


OK = runs_for("3s")


def _master_and_worker(
    master: dict[str, str], worker: dict[str, str], **options: Any
) -> Callable[[str], dict[str, Any]]:
    """How to make a PyTorchJob of one Master and one Worker whose pods behave as their annotations say
    (``options``: v1job's)."""
    return lambda name: v1job("PyTorchJob", name, {"Master": (1, master), "Worker": (1, worker)}, **options)


def mix() -> list[Scenario]:
    """The jobs of the crash storm: every kind, every way to end."""
    return [
        Scenario(
            "ok-pt",
            "PyTorchJob",
            lambda n: v1job("PyTorchJob", n, {"Master": (1, OK), "Worker": (2, OK)}),
            Outcome("Succeeded", "PyTorchJobSucceeded"),
            _created({}),
        ),
        Scenario(
            "ok-tf",
            "TFJob",
            lambda n: v1job("TFJob", n, {"Chief": (1, OK), "Worker": (1, OK)}),
            Outcome("Succeeded", "TFJobSucceeded"),
            _created({}),
        ),
        Scenario(
            "ok-xgb",
            "XGBoostJob",
            lambda n: v1job("XGBoostJob", n, {"Master": (1, OK), "Worker": (1, OK)}),
            Outcome("Succeeded", "XGBoostJobSucceeded"),
            _created({}),
        ),
        Scenario(
            "ok-paddle",
            "PaddleJob",
            lambda n: v1job("PaddleJob", n, {"Master": (1, OK), "Worker": (1, OK)}),
            Outcome("Succeeded", "PaddleJobSucceeded"),
            _created({}),
        ),
        Scenario(
            "ok-jax",
            "JAXJob",
            lambda n: v1job("JAXJob", n, {"Worker": (2, OK)}),
            Outcome("Succeeded", "JAXJobSucceeded"),
            _created({}),
        ),
        Scenario(
            "inplace",
            "PyTorchJob",
            _master_and_worker(HANG, HANG, run_policy={"backoffLimit": 5}),
            Outcome("Succeeded", "PyTorchJobSucceeded"),
            _all(_restart_count(2), _created({})),
            act=_act_as_kubelet_restarting_the_worker,
        ),
        Scenario(
            "never",
            "PyTorchJob",
            _master_and_worker(HANG, fails(2, after="2s"), restart_policy="Never"),
            Outcome("Failed", "PyTorchJobFailed"),
            _all(_no_live_pods, _created({})),
        ),
        Scenario(
            "backoff",
            "PyTorchJob",
            _master_and_worker(
                HANG, fails(137, after="1s"), restart_policy="ExitCode", run_policy={"backoffLimit": 2}
            ),
            Outcome("Failed", "BackoffLimitExceeded"),
            _all(_restart_count(3), _created({"worker": 3}), _no_live_pods),
        ),
        Scenario(
            "deadline",
            "PyTorchJob",
            _master_and_worker(HANG, HANG, run_policy={"activeDeadlineSeconds": 8}),
            Outcome("Failed", "DeadlineExceeded"),
            _all(_no_live_pods, _created({})),
        ),
        Scenario(
            "ttl",
            "PyTorchJob",
            _master_and_worker(OK, OK, run_policy={"ttlSecondsAfterFinished": 3}),
            Outcome(None),
            _created({}),
        ),
        Scenario(
            "suspend",
            "PyTorchJob",
            _master_and_worker(OK, OK, run_policy={"suspend": True}),
            Outcome("Succeeded", "PyTorchJobSucceeded"),
            _created({}),
            act=_unsuspend_later,
        ),
        Scenario(
            "tj-ok",
            "TrainJob",
            lambda n: trainjob(n, "storm-ok", trainer={"numNodes": 2}),
            Outcome("Complete", "AllJobsCompleted"),
            _created({}),
            runtime=training_runtime("storm-ok", pod_annotations=OK),
        ),
        Scenario(
            "tj-fail",
            "TrainJob",
            lambda n: trainjob(n, "storm-fail"),
            Outcome("Failed", "FailedJobs"),
            _all(_created({"node": 2}), _no_live_pods),
            runtime=training_runtime("storm-fail", pod_annotations=fails(1, after="1s"), backoff_limit=1),
        ),
    ]


def plan(count: int, scenarios: Sequence[Scenario]) -> list[tuple[str, Scenario]]:
    """``count`` jobs, the scenarios taken in turn: (name, scenario)."""
    return [
        (f"{scenarios[i % len(scenarios)].prefix}-{i:03d}", scenarios[i % len(scenarios)])
        for i in range(count)
    ]


async def outcome_of(jobs: Jobs, name: str, kind: str) -> tuple[dict[str, Any] | None, Outcome | None]:
    """The job and how it ended so far (None while it has not ended)."""
    job = await jobs.get(name, kind)
    if job is None:
        return None, Outcome(None)
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition["type"] in ("Succeeded", "Complete", "Failed"):
            return job, Outcome(condition["type"], condition.get("reason", ""))
    return job, None


def elapsed(since: float) -> str:
    return f"{time.monotonic() - since:.1f}s"


@dataclass
class MixRun:
    """A mix of jobs run under some fault: submit them, wait for every one to end, judge how each
    ended from the API server's history, then delete them and check nothing is left behind."""

    jobs: Jobs
    history: PodHistory
    planned: list[tuple[str, Scenario]]
    actors: list[asyncio.Task[object]] = field(default_factory=list)

    async def submit(self) -> None:
        runtimes = {id(s): s.runtime for _, s in self.planned if s.runtime is not None}
        for runtime in runtimes.values():
            await self.jobs.create(runtime)
        await asyncio.gather(*(self.jobs.create(s.make(name)) for name, s in self.planned))
        self.actors = [
            asyncio.create_task(s.act(self.jobs, name)) for name, s in self.planned if s.act is not None
        ]

    async def wait_all_ended(self, timeout: float) -> None:
        """Until every job has ended (one with a TTL: is gone); fail naming those that have not."""
        deadline = time.monotonic() + timeout
        pending = list(self.planned)
        while pending:
            try:
                ends = await asyncio.gather(*(outcome_of(self.jobs, n, s.kind) for n, s in pending))
            except (aiohttp.ClientError, OSError) as exc:  # the API server is away for a moment
                print(f"waiting for the API server: {exc}")
            else:
                pending = [
                    (name, s)
                    for (name, s), (_, end) in zip(pending, ends, strict=True)
                    if end is None or (s.outcome.condition is None and end.condition is not None)
                ]
            if pending and time.monotonic() > deadline:
                shown = []
                for name, s in pending[:10]:
                    job = await self.jobs.get(name, s.kind)
                    conditions = [
                        (c["type"], c["status"])
                        for c in ((job or {}).get("status") or {}).get("conditions") or []
                    ]
                    shown.append(f"{name}: {conditions}, live pods {self.history.live_pods(name)}")
                raise AssertionError(
                    f"{len(pending)} jobs did not end in {timeout:.0f}s:\n" + "\n".join(shown)
                )
            if pending:
                await asyncio.sleep(1.0)

    async def judge(self, headline: str, controller: ControllerProcess) -> None:
        """Once the controller has settled its cleanup (failed jobs' pods, TTLs): print what the run
        did after ``headline``, and fail with every problem and the controller's last log lines."""
        await asyncio.sleep(3)
        problems = await self.problems()
        print(
            f"\n{headline}; pods created {self.pods_created}, duplicates {len(self.history.overlaps)}, "
            f"problems {len(problems)}"
        )
        assert not problems, "\n".join(problems[:40]) + "\n" + controller.tail()

    async def problems(self) -> list[str]:
        """Every way the run went wrong: a wrong end, a check of the scenario, two live pods for a slot."""
        found: list[str] = []
        for name, scenario in self.planned:
            job, end = await outcome_of(self.jobs, name, scenario.kind)
            if end != scenario.outcome:
                found.append(f"{name}: ended {end}, expected {scenario.outcome}")
            found += scenario.check(job, self.history, name)
        found += [f"two live pods for {slot}: {sorted(uids)}" for slot, uids in self.history.overlaps]
        return found

    def stop_actors(self) -> None:
        for actor in self.actors:
            actor.cancel()

    async def delete_all_and_wait_gone(self, stall: float = 60) -> None:
        """Delete the jobs; their pods, services and snapshots must all go (no orphans).

        The garbage collector deletes them at its client's rate (kube-controller-manager's 20 a
        second), so thousands take minutes: what fails the check is no object going for ``stall``
        seconds while some are left, which is what an orphan looks like, whatever the suite's size.
        """
        for name, scenario in self.planned:
            if scenario.outcome.condition is not None:
                await self.jobs.delete(name, scenario.kind)
        core, namespace = self.jobs.core, self.jobs.namespace

        async def left() -> list[tuple[str, Any]]:
            pods = await core.list_namespaced_pod(namespace)
            services = await core.list_namespaced_service(namespace)
            maps = await core.list_namespaced_config_map(namespace)
            owned = [c for c in maps.items if c.metadata.owner_references]
            kinds = (("pod", pods.items), ("service", services.items), ("configmap", owned))
            return [(kind, o) for kind, items in kinds for o in items]

        remaining = await left()
        fewest, since = len(remaining), time.monotonic()
        while remaining:  # progress is a new low: objects created again as others go are no progress
            await asyncio.sleep(1.0)
            remaining = await left()
            if len(remaining) < fewest:
                fewest, since = len(remaining), time.monotonic()
            elif time.monotonic() - since > stall:
                raise AssertionError(
                    f"{len(remaining)} orphans, none gone for {stall:.0f}s: "
                    f"{[_leftover(kind, o) for kind, o in remaining[:10]]}"
                )

    @property
    def pods_created(self) -> int:
        return sum(len(u) for u in self.history.created.values())


@contextlib.asynccontextmanager
async def mix_run(jobs: Jobs, count: int, controller: ControllerProcess) -> AsyncIterator[MixRun]:
    """``count`` jobs of the mix, with every pod recorded from the start and ``controller`` started;
    afterwards the actors, the controller and the recording are stopped, in that order."""
    history = PodHistory(jobs.core, jobs.namespace)
    await history.start()
    run = MixRun(jobs, history, plan(count, mix()))
    controller.start()
    try:
        yield run
    finally:
        run.stop_actors()
        controller.stop()
        await history.stop()
