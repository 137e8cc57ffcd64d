"""How the client reads a job of any kind: its state, failure, rank 0 pod, report, one status line.

The kinds themselves (names, groups, success conditions, default containers) are in the registry,
``kubetrain.api.kinds``; this module reads jobs with it.

The v1 kinds finish with a ``Succeeded`` or ``Failed`` condition; a TrainJob
with ``Complete`` or ``Failed``. Rank 0 (whose logs and report matter) is the
pod labelled ``training.kubeflow.org/job-role=master`` for v1 kinds, and the
first pod of the ``node`` replicated job for a TrainJob.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from kubetrain import naming
from kubetrain.api import kinds as registry
from kubetrain.api.kinds import JobKind

Obj = dict[str, Any]
State = Literal["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]

KINDS: dict[str, JobKind] = {k.kind: k for k in registry.JOBS}
kind_of = registry.job_kind  # by any of its names, case-insensitively: PyTorchJob, pytorchjobs, ptj


def conditions(job: Obj) -> list[Obj]:
    found: list[Obj] = (job.get("status") or {}).get("conditions") or []
    return found


def is_true(job: Obj, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions(job))


def state(job: Obj) -> State:
    """A job's state in one word, the same for every kind."""
    kind = kind_of(job["kind"])
    ladder: tuple[tuple[str, State], ...] = (
        (kind.success, "Succeeded"),
        ("Failed", "Failed"),
        ("Suspended", "Suspended"),
        ("Restarting", "Restarting"),
        ("Running", "Running"),
    )
    for condition, named in ladder:  # the first true condition names the state
        if is_true(job, condition):
            return named
    if not kind.is_v1 and (job.get("status") or {}).get("jobsStatus"):
        active = sum(j.get("active") or 0 for j in job["status"]["jobsStatus"])
        return "Running" if active else "Pending"
    return "Pending"


def is_finished(job: Obj) -> bool:
    return state(job) in ("Succeeded", "Failed")


def failure(job: Obj) -> tuple[str, str]:
    """``(reason, message)`` of a failed job's Failed condition."""
    for condition in conditions(job):
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return str(condition.get("reason") or "Failed"), str(condition.get("message") or "")
    return "", ""


def failed_replica(first: Obj) -> str:
    """Where a ``status.firstFailure`` happened: ``Worker 1 (pod mnist-worker-1 on node gpu-3 at T)``."""
    where = f"{first.get('replicaType')} {first.get('index')} (pod {first.get('pod')}"
    where += f" on node {first['node']}" if first.get("node") else ""
    return where + (f" at {first['time']})" if first.get("time") else ")")


def first_failure_log(job: Obj) -> tuple[str, str] | None:
    """``(whose, lines)``: the last lines the replica that failed first wrote, from the failed job's
    ``status.firstFailure``; None when the controller named none (upstream's, or no container failed)."""
    first = (job.get("status") or {}).get("firstFailure") or {}
    if not first.get("logTail"):
        return None
    whose = f"{first.get('replicaType')} {first.get('index')} ({first.get('pod')}), which failed first"
    return whose, str(first["logTail"])


def disruption_condition(pod: Obj) -> Obj | None:
    """The pod's ``DisruptionTarget`` condition while it is true: the cluster is stopping the pod --
    preempted, evicted, drained, its node going away -- for reasons of its own, not the pod's."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return dict(condition)
    return None


def disruption(pod: Obj) -> str | None:
    """Why the cluster is stopping a pod (``reason: message`` of its ``DisruptionTarget``); None when
    nothing disrupts it."""
    condition = disruption_condition(pod)
    if condition is None:
        return None
    words = [str(condition[k]) for k in ("reason", "message") if condition.get(k)]
    return ": ".join(words) or "DisruptionTarget"


def rank0_selector(job: Obj, *, role: str | None = None, index: int = 0) -> str:
    """Label selector of one replica's pod: rank 0 by default, or ``role`` (Master, Worker, node...) at ``index``."""
    name = job["metadata"]["name"]
    if kind_of(job["kind"]).is_v1:
        if role is None:
            return f"{naming.LABEL_JOB_NAME}={name},{naming.LABEL_JOB_ROLE}=master"
        return (
            f"{naming.LABEL_JOB_NAME}={name},{naming.LABEL_REPLICA_TYPE}={role.lower()},"
            f"{naming.LABEL_REPLICA_INDEX}={index}"
        )
    return (
        f"{naming.JOBSET_NAME}={name},{naming.JOBSET_REPLICATED_JOB}={role or 'node'},"
        f"{naming.JOB_COMPLETION_INDEX}={index}"
    )


def default_container(job: Obj) -> str:
    """The container whose logs are the training logs."""
    return kind_of(job["kind"]).default_container


def report(job: Obj) -> Obj:
    """Rank 0's training report (last checkpoint, step, metrics) the controller copied into the job.

    A metric that is not a finite number (a loss of NaN after no step, an infinite perplexity) reads
    as None: the report travels on as JSON (Airflow's XCom through its execution API, KFP outputs),
    which has no NaN or Infinity."""
    text = (job["metadata"].get("annotations") or {}).get(naming.ANNOTATION_TRAINING_REPORT)
    if not text:
        return {}
    try:
        loaded = json.loads(text, parse_constant=lambda _: None)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def trainer_status(job: Obj) -> Obj:
    """The progress the training last reported (Kubeflow Trainer's ``trainerStatus`` fields), or {}.

    A TrainJob keeps it in ``status.trainerStatus``; a v1 job in an annotation (docs/observability.md)."""
    if not kind_of(job["kind"]).is_v1:
        found = (job.get("status") or {}).get("trainerStatus")
        return found if isinstance(found, dict) else {}
    text = (job["metadata"].get("annotations") or {}).get(naming.ANNOTATION_TRAINER_STATUS)
    try:
        loaded = json.loads(text) if text else {}
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def duration(seconds: int | float) -> str:
    """``1h02m``, ``3m05s``, ``45s``: a time left, for people."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


STEP_METRICS = ("currentStep", "totalSteps")  # how kubetrain.progress sends the step (no field for it)


def progress_line(job: Obj) -> str:
    """The reported progress in words: ``step 7/10, 70%, ETA 1m30s, loss 0.14``; empty before any report."""
    reported = trainer_status(job)
    if not reported:
        return ""
    metrics = {str(m.get("name")): str(m.get("value")) for m in reported.get("metrics") or []}
    parts = []
    if "currentStep" in metrics:
        total = metrics.get("totalSteps")
        parts.append(f"step {metrics['currentStep']}" + (f"/{total}" if total else ""))
    if reported.get("progressPercentage") is not None:
        parts.append(f"{reported['progressPercentage']}%")
    if reported.get("estimatedRemainingSeconds") is not None:
        parts.append(f"ETA {duration(reported['estimatedRemainingSeconds'])}")
    parts += [f"{name} {value}" for name, value in metrics.items() if name not in STEP_METRICS]
    return ", ".join(parts)


def replica_counts(job: Obj) -> dict[str, dict[str, int]]:
    """Active, succeeded and failed counts per replica type (v1) or replicated job (TrainJob)."""
    status = job.get("status") or {}
    if kind_of(job["kind"]).is_v1:
        return {
            rtype: {k: int(v) for k, v in counts.items() if k in ("active", "succeeded", "failed") and v}
            for rtype, counts in sorted((status.get("replicaStatuses") or {}).items())
        }
    return {
        entry["name"]: {k: int(entry[k]) for k in ("active", "succeeded", "failed") if entry.get(k)}
        for entry in status.get("jobsStatus") or []
    }


def disruptions_line(status: Obj) -> str:
    """``2 (preempted, evicted or drained; not failures; 960 GPU-seconds cut short)``."""
    cut_short = status.get("disruptedGPUSeconds")
    cost = f"; {cut_short} GPU-seconds cut short" if cut_short else ""
    return f"{status.get('disruptions') or 0} (preempted, evicted or drained; not failures{cost})"


def queue_of(job: Obj) -> str | None:
    """The Kueue LocalQueue the job was created in, if any."""
    queue: str | None = (job["metadata"].get("labels") or {}).get(naming.LABEL_KUEUE_QUEUE_NAME)
    return queue


def admission_wait(workload: Obj, position: int | None = None) -> str | None:
    """Why Kueue has not admitted a Workload yet, in its own words (its QuotaReserved condition's message,
    e.g. "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in
    flavor gpu, 8 more needed"), after its place in the LocalQueue where Kueue reports it (``position``:
    Kueue's ``positionInLocalQueue``, 0 for the next; shown from 1); None once it is admitted or before
    Kueue has looked at it."""
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "QuotaReserved":
            if condition.get("status") == "True":
                return None
            message = condition.get("message") or None
            if position is None:
                return message
            return f"position {position + 1}" + (f"; {message}" if message else "")
    return None


def queue_position(pending: Obj, workload: str) -> int | None:
    """``positionInLocalQueue`` of Workload ``workload`` in a LocalQueue's ``pendingworkloads`` (Kueue's
    visibility API); None when it is not listed (admitted meanwhile, or past the summary's limit)."""
    for item in pending.get("items") or []:
        if (item.get("metadata") or {}).get("name") == workload:
            position = item.get("positionInLocalQueue")
            return int(position) if position is not None else None
    return None


def queued_line(job: Obj, waiting: str | None = None) -> str | None:
    """``queued in LocalQueue team-a: <why>`` while Kueue holds the job suspended (``<why>``:
    ``admission_wait``'s words); None otherwise."""
    queue = queue_of(job)
    if queue is None or state(job) not in ("Suspended", "Pending") or not _asks_suspend(job):
        return None
    return f"queued in LocalQueue {queue}: " + (waiting or "waiting for Kueue to admit it")


def _asks_suspend(job: Obj) -> bool:
    spec = job.get("spec") or {}
    return bool((spec.get("runPolicy") or {}).get("suspend") or spec.get("suspend"))


def restarts(job: Obj) -> int:
    """How often the job was restarted: a v1 job's ``restartCount``, a TrainJob's ``restarts``."""
    status = job.get("status") or {}
    return int(status.get("restartCount") or status.get("restarts") or 0)


def status_line(job: Obj, *, waiting: str | None = None) -> str:
    """One line saying what the job is doing: state, its queue while Kueue holds it (``waiting``: the
    Workload's reason, ``admission_wait``), replica counts, progress, restarts, last checkpoint."""
    meta, status = job["metadata"], job.get("status") or {}
    parts = [f"{job.get('kind', 'job')} {meta['namespace']}/{meta['name']}: {state(job)}"]
    queued = queued_line(job, waiting)
    if queued:
        parts.append(queued)
    for rtype, counts in replica_counts(job).items():
        if counts:
            parts.append(f"{rtype} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    progress = progress_line(job)
    if progress:
        parts.append(progress)
    if count := restarts(job):
        parts.append(f"restarts {count}")
    if status.get("disruptions"):
        parts.append(f"disruptions {disruptions_line(status)}")
    checkpoint = (meta.get("annotations") or {}).get(naming.ANNOTATION_LAST_CHECKPOINT) or report(job).get(
        "last_checkpoint"
    )
    if checkpoint:
        parts.append(f"last checkpoint {checkpoint}")
    refused = next(
        (c for c in conditions(job) if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), None
    )
    if refused is not None:  # the controller keeps trying; the user may have to act
        parts.append(str(refused.get("message") or refused.get("reason")))
    return "; ".join(parts)
