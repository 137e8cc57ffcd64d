"""What a KFP launcher step does: submit (or resume) a training job, wait for it, report it.

The KFP components in ``kubetrain.components.launchers`` are thin: KFP embeds
a component's source in the step, so each one only calls ``launch`` from the
installed package, where the logic can be tested like any other code.

Identity and retries: a step's jobs are one lineage (``kubetrain.client.lineage``,
the rules the Airflow operators and ``kubetrain resume`` share), found by a hash
of the step's full identity: the pipeline run (``run_id``), the task
(``task_name``) and ``job_name``. The components fill ``run_id`` and
``task_name`` from KFP's placeholders when a pipeline calls them, so a retried
or preempted step finds its own job and a new run of the pipeline never finds
an old run's. When the step runs again (``set_retry``), the lineage's latest
attempt decides: still running, it is reattached; suspended, resumed;
succeeded, its result is reported again; failed, the next attempt is submitted
with the same checkpoint dir and volume once the failed one's pods are gone, so
training resumes from the last checkpoint. A dead job is never waited on again.
Inputs that change what the job runs make a lineage of their own.

Cancellation: KFP stops a cancelled step's pod with SIGTERM; the job is then
deleted, so nothing keeps training for a run nobody waits for. A SIGTERM also
comes when the cluster disrupts the step's own pod (preemption, eviction, a
node drain); that pod then carries a ``DisruptionTarget`` condition, and the job
is left running, so the step's retry reattaches to it instead of starting over.
"""

from __future__ import annotations

import base64
import html
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain import naming
from kubetrain.client import JobClient, attempt, builders, kinds, lineage
from kubetrain.client.errors import InvalidJobError, JobTimeoutError
from kubetrain.plot import Curve, render

Obj = dict[str, Any]
STATUS_EVERY = 30.0  # seconds between status lines while waiting


@dataclass
class LaunchRequest:
    """The launcher components' inputs, after KFP hands them over (empty values mean 'not given')."""

    kind: str
    job_name: str = ""
    run_id: str = ""
    task_name: str = ""
    namespace: str = ""
    manifest: Mapping[str, Any] | None = None
    image: str = ""
    command: Sequence[str] | None = None
    args: Sequence[str] | None = None
    num_workers: int = 1
    num_nodes: int = 1
    runtime: str = ""
    gpus: int = 0
    resources: Mapping[str, Any] | None = None
    env: Mapping[str, Any] | None = None
    checkpoint_dir: str = ""
    checkpoint_volume: str = ""
    checkpoint_secret: str = ""
    resume_from: str = ""
    ttl_seconds_after_finished: int = -1
    active_deadline_seconds: int = 0
    backoff_limit: int = -1
    stall_timeout_seconds: int = 0
    wait_timeout: float = 0.0
    queue_name: str = ""
    priority_class: str = ""
    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Obj] | None = None
    working_dir: str = ""

    def check(self) -> None:
        """Reject bad inputs before anything is submitted, naming the input."""
        if self.manifest:
            given = [k for k in ("image", "command", "args", "runtime") if getattr(self, k)]
            if given:
                raise InvalidJobError(
                    f"pass either manifest (a full job) or the convenience inputs, not both: {given}"
                )
        elif not self.image:
            raise InvalidJobError("image is required when no manifest is given")
        if self.kind == "TrainJob" and not self.manifest and not self.runtime:
            raise InvalidJobError("runtime is required for a TrainJob, e.g. runtime='torch-distributed'")
        builders.queue_labels(self.queue_name, self.priority_class)
        if self.wait_timeout < 0:
            raise InvalidJobError(f"wait_timeout must be 0 (no limit) or positive (got {self.wait_timeout})")
        if self.resume_from and not self.checkpoint_dir and not self.manifest:
            raise InvalidJobError(
                "resume_from needs checkpoint_dir: where the job reads and writes checkpoints"
            )
        for field_name in ("run_id", "task_name"):
            if "{{$" in getattr(self, field_name):
                raise InvalidJobError(
                    f"{field_name} is {getattr(self, field_name)!r}: KFP did not resolve that placeholder; "
                    "pass it where the pipeline calls the component"
                )
        if not self.run_id:
            raise InvalidJobError(
                "run_id is empty, so this step could not tell its pipeline run from another run's: pass "
                "run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER (kubetrain's components do when a pipeline calls "
                "them; a component loaded from YAML does not), or a fixed value to continue one lineage "
                "across runs"
            )

    def job_base_name(self) -> str:
        """What the step's jobs are called after: ``job_name``, the manifest's name, else the task."""
        given = self.job_name or (self.manifest or {}).get("metadata", {}).get("name") or self.task_name
        return str(given or "kfp-step")

    def identity(self) -> lineage.Identity:
        """The step's full identity: pipeline run, task and job name (every retry of the step has it)."""
        return lineage.Identity.kfp(self.run_id, self.task_name, self.job_base_name())

    def lineage_name(self) -> str:
        """The readable lineage of the step's jobs: the job name with a hash of the step's identity,
        unique per pipeline run and task; its attempts are named ``<lineage>-a<N>``."""
        return naming.dns_label(f"{self.job_base_name()[:30]}-{self.identity().hash[:8]}")

    def lineage_request(self, namespace: str) -> lineage.Request:
        """What ``kubetrain.client.lineage`` needs to find, reattach to or submit this step's job."""
        body = self.build(naming.attempt_name(self.lineage_name(), 1))
        return lineage.Request(
            identity=self.identity(),
            kind=self.kind,
            namespace=namespace,
            base_lineage=self.lineage_name(),
            spec_hash=lineage.spec_hash(body),
            template=body,
        )

    def build(self, name: str) -> Obj:
        """The first attempt's manifest."""
        body: Obj
        if self.manifest:
            body = _whole_numbers(json.loads(json.dumps(self.manifest)))
            body.setdefault("metadata", {})["name"] = name
            if body.get("kind") and body["kind"] != self.kind:
                raise InvalidJobError(f"manifest is a {body['kind']}; this launcher runs {self.kind}s")
            body["kind"] = self.kind
        else:
            spec = builders.JobSpec(
                name=name,
                image=self.image,
                command=list(self.command) if self.command else None,
                args=list(self.args) if self.args else None,
                env=dict(self.env) if self.env else None,
                gpus=self.gpus,
                resources=dict(self.resources) if self.resources else None,
                checkpoint_dir=self.checkpoint_dir or None,
                checkpoint_volume=self.checkpoint_volume or None,
                checkpoint_secret=self.checkpoint_secret or None,
                ttl_seconds_after_finished=None
                if self.ttl_seconds_after_finished < 0
                else self.ttl_seconds_after_finished,
                active_deadline_seconds=self.active_deadline_seconds or None,
                backoff_limit=None if self.backoff_limit < 0 else self.backoff_limit,
                stall_timeout_seconds=self.stall_timeout_seconds or None,
                node_selector=dict(self.node_selector) if self.node_selector else None,
                tolerations=list(self.tolerations) if self.tolerations else None,
                working_dir=self.working_dir or None,
            )
            if self.kind == "TrainJob":
                body = builders.trainjob(spec, runtime=self.runtime, num_nodes=self.num_nodes)
            else:
                body = builders.pytorchjob(spec, num_workers=self.num_workers)
        meta = body["metadata"]
        labels = meta.setdefault("labels", {})
        labels.update(builders.queue_labels(self.queue_name, self.priority_class))
        labels[naming.LABEL_LINEAGE] = self.lineage_name()
        annotations = meta.setdefault("annotations", {})
        annotations.setdefault(naming.ANNOTATION_ATTEMPT, "1")
        if self.resume_from:
            annotations[naming.ANNOTATION_LAST_CHECKPOINT] = self.resume_from
        return body


def _whole_numbers(value: Any) -> Any:
    """``value`` with every float that is a whole number made an int. KFP passes a ``manifest`` as a
    protobuf Struct, whose numbers are all floats: ``replicas: 1`` arrives as ``1.0``, which the API
    server's validation rules refuse where they expect an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


@dataclass
class LaunchResult:
    state: str
    job_name: str
    namespace: str
    last_checkpoint: str
    metrics: dict[str, float]
    report: Obj
    curves: list[Curve] = field(default_factory=list)  # of the lineage's attempts, from rank 0's logs


def _log(message: str) -> None:
    print(f"[kubetrain] {message}", flush=True)


def launch(request: LaunchRequest, *, client: JobClient | None = None) -> LaunchResult:
    """Submit or resume the request's job, wait for it, and return what it reported."""
    request.check()
    owned = client is None
    jobs = client or JobClient.connect()
    try:
        namespace = request.namespace or _default_namespace()
        job = _submit_or_resume(jobs, request, namespace)
        return _wait(jobs, request, job)
    finally:
        if owned:
            jobs.close()


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _default_namespace() -> str:
    """The step's own namespace in a cluster (its service account's), else ``default``."""
    path = SERVICE_ACCOUNT_NAMESPACE
    return path.read_text().strip() if path.exists() else "default"


def _own_pod(fallback_namespace: str) -> tuple[str, str] | None:
    """(namespace, name) of the step's own pod: KFP gives its name as ``KFP_POD_NAME``."""
    name = os.environ.get("KFP_POD_NAME")
    if not name:
        return None
    namespace = SERVICE_ACCOUNT_NAMESPACE
    return (namespace.read_text().strip() if namespace.exists() else fallback_namespace), name


def _step_disruption(jobs: JobClient, namespace: str) -> str | None:
    """Why the cluster is stopping the step's pod, if it is (see ``kinds.disruption``)."""
    pod = _own_pod(namespace)
    return jobs.disruption(*pod) if pod else None


def _submit_or_resume(jobs: JobClient, request: LaunchRequest, namespace: str) -> Obj:
    """Reattach to, resume or submit this step's job, as its lineage's attempts say."""
    prepared = attempt.prepare(jobs, request.lineage_request(namespace), log=_log)
    job = prepared.job
    _log(f"{request.kind} {namespace}/{job['metadata']['name']}: attempt {lineage.attempt_of(job)}")
    return job


def _wait(jobs: JobClient, request: LaunchRequest, job: Obj) -> LaunchResult:
    kind, name, namespace = job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]

    def on_sigterm(signum: int, frame: Any) -> None:
        disrupted = _step_disruption(jobs, namespace)
        if disrupted:
            _log(
                f"the step's pod is being stopped by the cluster ({disrupted}): {kind} {namespace}/{name} "
                "keeps training, and the step's retry reattaches to it"
            )
        else:
            _log(f"step cancelled: deleting {kind} {namespace}/{name}")
            jobs.delete(kind, name, namespace)
        sys.exit(143)

    previous = (
        signal.signal(signal.SIGTERM, on_sigterm)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    stop = threading.Event()
    streamer = threading.Thread(target=_stream_logs, args=(jobs, job, stop), daemon=True)
    streamer.start()
    try:
        final = _watch_until_finished(jobs, request, job)
    finally:
        stop.set()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    outcome = attempt.Result.of(final)
    result = LaunchResult(
        state=outcome.state,
        job_name=name,
        namespace=namespace,
        last_checkpoint=str(outcome.last_checkpoint or ""),
        metrics=outcome.numbers(),
        report=outcome.report,
        curves=_curves(jobs, final),
    )
    # A failed job raises JobFailedError: its reason and the last lines of the replica that failed first.
    attempt.finish(jobs, final)
    _log(
        f"{kind} {name} {result.state}; last checkpoint {result.last_checkpoint or '-'}; metrics {result.metrics}"
    )
    return result


def _watch_until_finished(jobs: JobClient, request: LaunchRequest, job: Obj) -> Obj:
    """Watch the job until it finishes, with a status line (and why pods wait) every STATUS_EVERY seconds.

    ``wait_timeout`` counts from admission: while Kueue holds the job queued, its clock does not run."""
    kind, name, namespace = job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]
    changes = attempt.follow(
        jobs,
        kind,
        name,
        namespace,
        last_seen=job,
        every=STATUS_EVERY,
        timeout=request.wait_timeout or None,
        timeout_from_admission=True,
    )
    for seen in changes:
        if seen.finished:
            return seen.job
        if seen.event is attempt.Event.TIMED_OUT:
            raise JobTimeoutError(
                f"{kind} {namespace}/{name} did not finish within wait_timeout={request.wait_timeout:g}s; "
                f"it is {kinds.state(seen.job)}{_pending(jobs.pending_reasons(seen.job))}"
            )
        if seen.event is attempt.Event.DUE:
            status = attempt.status(jobs, seen.job)
            _log(status.line + _pending(status.unscheduled))
    raise AssertionError("a wait ends when the job finished or the timeout passed")


def _pending(reasons: Sequence[str]) -> str:
    return f" (pending: {'; '.join(reasons)})" if reasons else ""


def _curves(jobs: JobClient, job: Obj) -> list[Curve]:
    """The lineage's curves (best effort: a finished job's result does not hang on its logs)."""
    try:
        return jobs.curves(job)[1]
    except Exception as exc:
        _log(f"no curves: {exc}")
        return []


def _stream_logs(jobs: JobClient, job: Obj, stop: threading.Event) -> None:
    """Rank 0's log lines into the step's log, until the job ends (best effort)."""
    try:
        for line in jobs.follow_logs(job):
            if stop.is_set():
                return
            print(f"[{job['metadata']['name']}] {line.rstrip()}", flush=True)
    except Exception as exc:
        _log(f"log streaming stopped: {exc}")


def write_model(path: str, result: LaunchResult, request: LaunchRequest) -> dict[str, Any]:
    """The Model artifact's content: where the final checkpoint lives (claim and path)."""
    pointer = {
        "checkpoint": result.last_checkpoint,
        "volume": request.checkpoint_volume,
        "job": f"{result.namespace}/{result.job_name}",
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(pointer, indent=2))
    return pointer


def write_curves(path: str, result: LaunchResult) -> str:
    """The HTML artifact of the step's curves: a PNG of every metric of every attempt (``kubetrain
    plot``'s), inline, as the KFP UI shows an HTML artifact; a sentence instead when there is no curve
    or no matplotlib. Returns what the page says beside the picture."""
    title = f"{result.namespace}/{result.job_name}"
    with tempfile.TemporaryDirectory() as scratch:
        try:
            png = render(result.curves, Path(scratch) / "curves.png", title=title)
            image = base64.b64encode(png.read_bytes()).decode()
            body, said = f'<img alt="metric curves of {title}" src="data:image/png;base64,{image}">', ""
        except (ValueError, RuntimeError) as exc:  # no curve, or no matplotlib
            body = said = html.escape(str(exc))
    attempts = ", ".join(c.attempt + (" (failed)" if c.failed else "") for c in result.curves)
    page = f"<!doctype html><title>{title}</title><h3>{title}</h3><p>attempts: {attempts}</p>{body}"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(page)
    return said


def with_task_config(inputs: dict[str, Any], task_config: Any) -> dict[str, Any]:
    """Inputs with the pipeline's task config (resources, env, node selector, tolerations) merged in;
    inputs given explicitly win."""
    if task_config is None:
        return inputs
    merged = dict(inputs)
    resources = getattr(task_config, "resources", None)
    if resources and not merged.get("resources"):
        merged["resources"] = {k: v for k, v in resources.items() if k in ("requests", "limits")}
    env = getattr(task_config, "env", None)
    if env:
        from_task = {e["name"]: e.get("value", "") for e in env if isinstance(e, Mapping) and "name" in e}
        merged["env"] = {**from_task, **(merged.get("env") or {})}
    for key in ("node_selector", "tolerations"):
        value = getattr(task_config, key, None)
        if value and not merged.get(key):
            merged[key] = value
    return merged


def run_component(kind: str, inputs: dict[str, Any]) -> tuple[str, str, str]:
    """The body of a launcher component: ``inputs`` are its parameters, artifacts included."""
    metrics, model, curves = inputs.pop("metrics"), inputs.pop("model"), inputs.pop("curves")
    inputs = with_task_config(inputs, inputs.pop("task_config", None))
    request = LaunchRequest(kind=kind, **inputs)
    result = launch(request)
    for key, value in sorted(result.metrics.items()):
        metrics.log_metric(key, value)
    said = write_curves(curves.path, result)
    if said:
        _log(f"no curves drawn: {said}")
    pointer = write_model(model.path, result, request)
    model.metadata.update({k: v for k, v in pointer.items() if v})
    return result.state, result.job_name, result.last_checkpoint
