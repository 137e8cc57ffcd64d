"""Operators that run a training job and wait for it: PyTorchJob, TrainJob, and the other v1 kinds.

Each task submits one job (a full manifest, or one built from convenience
arguments, checked before anything is submitted) and waits for it, in the
worker with status lines and rank 0's log streamed into the task log, or
deferred to the triggerer (``deferrable=True``).

Identity and retries. The job's name is derived from the DAG, task, run and map
index, so it is the same every time the task runs, and the job carries those
as labels plus the try number. Before submitting, the task looks for the job a
previous try started: the ``task_state_store`` on Airflow 3.3+
(``ResumableJobMixin``, ``durable=True``), else a label search. A job that is
still running is reattached to; one that succeeded is returned without running
again; one that **failed is never reattached to**: the next attempt is
submitted with the same checkpoint dir and lineage and ``attempt + 1``, so
training resumes from its last checkpoint.

Cancellation: ``on_kill`` (and the trigger's ``on_kill`` on 3.3+) deletes or
suspends the job (``on_kill_action``); after a normal finish ``on_finish_action``
deletes it, deletes it only when it succeeded, or keeps it (the default; set
``ttl_seconds_after_finished`` to let the controller clean up).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kubetrain import naming
from kubetrain.client import JobClient, JobFailedError, builders, kinds
from kubetrain.client.builders import JobSpec
from kubetrain.client.errors import InvalidJobError, JobError
from kubetrain.operators.compat import AirflowException, BaseOperator, ResumableJobMixin, conf
from kubetrain.operators.hooks import ClusterConnection, KubetrainHook
from kubetrain.operators.links import TrainingJobLink
from kubetrain.operators.triggers import JobTrigger, status_line

Obj = dict[str, Any]
ON_FINISH = ("delete", "delete_succeeded", "keep")
ON_KILL = ("delete", "suspend", "keep")
XCOM_JOB = "kubetrain_job"
LABEL_DAG = "kubetrain.dev/dag-id"
LABEL_TASK = "kubetrain.dev/task-id"
LABEL_RUN = "kubetrain.dev/run-id"
LABEL_MAP = "kubetrain.dev/map-index"
LABEL_TRY = "kubetrain.dev/try-number"

_Bases: tuple[type, ...] = (
    (ResumableJobMixin, BaseOperator) if ResumableJobMixin is not None else (BaseOperator,)
)


def task_identity(context: Mapping[str, Any]) -> dict[str, str]:
    """The labels that tie a job to one task instance (the try number separately)."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    mapped = map_index is not None and map_index >= 0
    return {
        LABEL_DAG: naming.label_value(ti.dag_id),
        LABEL_TASK: naming.label_value(ti.task_id),
        LABEL_RUN: naming.label_value(ti.run_id),
        LABEL_MAP: str(map_index) if mapped else "none",
    }


def derived_name(context: Mapping[str, Any]) -> str:
    """``<task>-<hash of dag, task, run, map index>``: the same on every try of one task instance."""
    ti = context["ti"]
    digest = hashlib.sha1(f"{ti.dag_id}/{ti.task_id}/{ti.run_id}/{getattr(ti, 'map_index', -1)}".encode())
    return naming.dns_label(f"{ti.task_id}-{digest.hexdigest()[:8]}")


class TrainingJobOperator(*_Bases):  # type: ignore[misc]
    """Run a Kubeflow training job (any kind) and wait for it.

    :param kind: PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob or TrainJob.
    :param job: a full manifest: a dict, a YAML string, or a path to a ``.yaml``/``.json`` file (templated).
        When given, the convenience arguments below that shape the job are not allowed.
    :param name: the job's name; default derived from the DAG, task, run and map index.
    :param namespace: where the job runs (default: the connection's namespace, else ``default``).
    :param image: container image (convenience form).
    :param command: container command, e.g. ``["python", "train.py"]``.
    :param args: container arguments.
    :param num_workers: v1 kinds: Workers besides the Master.
    :param num_nodes: TrainJob: nodes (default from the runtime).
    :param gpus: ``nvidia.com/gpu`` per replica (per node for TrainJob).
    :param resources: requests/limits per replica, or a flat mapping such as ``{"cpu": "4", "memory": "16Gi"}``.
    :param env: environment variables (a mapping, or a list of Kubernetes EnvVar dicts).
    :param checkpoint_dir: path in the pods where checkpoints live (opts in to checkpoint-aware resume).
    :param checkpoint_volume: a PersistentVolumeClaim mounted at ``checkpoint_dir`` on every replica.
    :param ttl_seconds_after_finished: the controller deletes the job this long after it finished.
    :param active_deadline_seconds: the job fails once it has run this long.
    :param backoff_limit: restarts allowed before the job fails (v1 kinds).
    :param clean_pod_policy: None, Running or All (v1 kinds).
    :param restart_policy: OnFailure, Always, Never or ExitCode (v1 kinds).
    :param runtime: TrainJob: the ClusterTrainingRuntime (or TrainingRuntime) to run on.
    :param scheduling: gang scheduling: ``min_available``, ``queue``, ``priority_class``, ``schedule_timeout_seconds``.
    :param node_selector: node labels the pods need.
    :param tolerations: tolerations of the pods.
    :param labels: extra labels of the job.
    :param annotations: extra annotations of the job.
    :param kubernetes_conn_id: the ``kubernetes`` connection to use.
    :param deferrable: wait in the triggerer instead of the worker.
    :param get_logs: stream rank 0's log into the task log (and its tail on failure).
    :param status_interval: seconds between status lines in the task log.
    :param wait_for_completion: wait for the job (False: submit and return its identity).
    :param on_finish_action: delete, delete_succeeded or keep the job after it finished.
    :param on_kill_action: delete, suspend or keep the job when the task is killed.
    :param durable: Airflow 3.3+: remember the job in the task state store so a retry reattaches or resumes.
    :param job_url_template: the extra link's URL, with ``{kind}``, ``{plural}``, ``{group}``, ``{namespace}``,
        ``{name}``; default from ``[kubetrain] job_url_template``.
    """

    template_fields: Sequence[str] = (
        "job",
        "name",
        "namespace",
        "image",
        "command",
        "args",
        "env",
        "num_workers",
        "num_nodes",
        "gpus",
        "checkpoint_dir",
        "checkpoint_volume",
        "runtime",
        "labels",
        "annotations",
    )
    template_ext: Sequence[str] = (".yaml", ".yml", ".json")
    template_fields_renderers = {"job": "yaml", "env": "json"}
    ui_color = "#c3dbf7"
    operator_extra_links = (TrainingJobLink(),)
    external_id_key = "kubetrain_job"
    default_kind = "PyTorchJob"

    def __init__(
        self,
        *,
        kind: str | None = None,
        job: Obj | str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        image: str | None = None,
        command: Sequence[str] | None = None,
        args: Sequence[str] | None = None,
        num_workers: int = 1,
        num_nodes: int | None = None,
        gpus: int = 0,
        resources: Mapping[str, Any] | None = None,
        env: Mapping[str, Any] | Sequence[Obj] | None = None,
        checkpoint_dir: str | None = None,
        checkpoint_volume: str | None = None,
        ttl_seconds_after_finished: int | None = None,
        active_deadline_seconds: int | None = None,
        backoff_limit: int | None = None,
        clean_pod_policy: str | None = None,
        restart_policy: str = "OnFailure",
        runtime: str | None = None,
        scheduling: Mapping[str, Any] | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Obj] | None = None,
        working_dir: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        get_logs: bool = True,
        status_interval: float = 60.0,
        wait_for_completion: bool = True,
        on_finish_action: str = "keep",
        on_kill_action: str = "delete",
        job_url_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        if ResumableJobMixin is None:
            kwargs.pop("durable", None)
        super().__init__(**kwargs)
        self.kind = kinds.kind_of(kind or self.default_kind).kind
        self._kind_given = kind is not None
        self.job = job
        self.name = name
        self.namespace = namespace
        self.image = image
        self.command = command
        self.args = args
        self.num_workers = num_workers
        self.num_nodes = num_nodes
        self.gpus = gpus
        self.resources = resources
        self.env = env
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_volume = checkpoint_volume
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.active_deadline_seconds = active_deadline_seconds
        self.backoff_limit = backoff_limit
        self.clean_pod_policy = clean_pod_policy
        self.restart_policy = restart_policy
        self.runtime = runtime
        self.scheduling = scheduling
        self.node_selector = node_selector
        self.tolerations = tolerations
        self.working_dir = working_dir
        self.labels = dict(labels or {})
        self.annotations = dict(annotations or {})
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.get_logs = get_logs
        self.status_interval = status_interval
        self.wait_for_completion = wait_for_completion
        self.on_finish_action = on_finish_action
        self.on_kill_action = on_kill_action
        self.job_url_template = job_url_template
        self._killed = False
        self._current: Obj | None = None
        self._check_arguments()

    # -- arguments -------------------------------------------------------------------------------
    def _check_arguments(self) -> None:
        """Reject bad arguments when the DAG is parsed, naming them."""
        if self.on_finish_action not in ON_FINISH:
            raise ValueError(
                f"on_finish_action must be one of {', '.join(ON_FINISH)} (got {self.on_finish_action!r})"
            )
        if self.on_kill_action not in ON_KILL:
            raise ValueError(
                f"on_kill_action must be one of {', '.join(ON_KILL)} (got {self.on_kill_action!r})"
            )
        if self.status_interval <= 0:
            raise ValueError(f"status_interval must be positive (got {self.status_interval!r})")
        if self.job is not None:
            shaping = {
                "image": self.image,
                "command": self.command,
                "args": self.args,
                "env": self.env,
                "runtime": self.runtime,
                "resources": self.resources,
            }
            given = sorted(k for k, v in shaping.items() if v)
            if given:
                raise ValueError(
                    f"pass either job (a full manifest) or convenience arguments, not both: {given}"
                )
        elif not self.image and not _templated(self.image):
            raise ValueError("image is required when no job manifest is given")
        if self.kind == "TrainJob" and self.job is None and not self.runtime:
            raise ValueError("runtime is required for a TrainJob, e.g. runtime='torch-distributed'")

    def _manifest_kind(self, kind: str | None) -> str:
        """A manifest's kind becomes the task's (its retries look for jobs of that kind); one that
        contradicts the operator's kind is refused."""
        if not kind:
            return self.kind
        try:
            found = kinds.kind_of(kind).kind
        except ValueError as exc:
            raise AirflowException(f"job: {exc}") from None
        if found != self.kind and self._kind_given:
            raise AirflowException(
                f"job is a {found} but this task runs {self.kind}s; use TrainingJobOperator for a {found}"
            )
        self.kind = found
        return found

    def build_manifest(self, context: Mapping[str, Any]) -> Obj:
        """The job to submit: the manifest given, or one built from the arguments; with identity labels."""
        name = self.name or derived_name(context)
        if self.job is not None:
            body = self._load_manifest(self.job)
            body.setdefault("metadata", {})
            body["metadata"].setdefault("name", name)
            body["kind"] = self._manifest_kind(body.get("kind"))
        else:
            spec = JobSpec(
                name=name,
                image=str(self.image),
                command=self.command,
                args=self.args,
                env=self.env,
                gpus=self.gpus,
                resources=self.resources,
                checkpoint_dir=self.checkpoint_dir,
                checkpoint_volume=self.checkpoint_volume,
                ttl_seconds_after_finished=self.ttl_seconds_after_finished,
                active_deadline_seconds=self.active_deadline_seconds,
                backoff_limit=self.backoff_limit,
                clean_pod_policy=self.clean_pod_policy,
                restart_policy=self.restart_policy,
                scheduling=self.scheduling,
                node_selector=self.node_selector,
                tolerations=self.tolerations,
                working_dir=self.working_dir,
                labels=self.labels,
                annotations=self.annotations,
            )
            if self.kind == "TrainJob":
                body = builders.trainjob(spec, runtime=str(self.runtime), num_nodes=self.num_nodes)
            elif self.kind == "PyTorchJob":
                body = builders.pytorchjob(spec, num_workers=self.num_workers)
            else:
                body = builders.v1_job(self.kind, spec, replicas=self._replicas())
        meta = body["metadata"]
        meta.setdefault("labels", {}).update(
            {**task_identity(context), LABEL_TRY: str(context["ti"].try_number)}
        )
        meta["labels"].setdefault(naming.LABEL_LINEAGE, meta["name"])
        meta.setdefault("annotations", {}).setdefault(naming.ANNOTATION_ATTEMPT, "1")
        return body

    def _replicas(self) -> dict[str, int]:
        workers = {"TFJob": "Worker", "XGBoostJob": "Worker", "PaddleJob": "Worker", "JAXJob": "Worker"}
        first = {"XGBoostJob": {"Master": 1}}.get(self.kind, {})
        return {**first, workers[self.kind]: self.num_workers}

    @staticmethod
    def _load_manifest(job: Obj | str) -> Obj:
        if isinstance(job, Mapping):
            return dict(job)
        text = job
        if "\n" not in job and Path(job).suffix in (".yaml", ".yml", ".json") and Path(job).exists():
            text = Path(job).read_text()
        loaded = yaml.safe_load(text)
        if not isinstance(loaded, dict):
            raise InvalidJobError(
                "job must be a manifest: a mapping with apiVersion, kind, metadata and spec"
            )
        return loaded

    def _connection(self) -> ClusterConnection:
        return KubetrainHook(conn_id=self.kubernetes_conn_id).cluster_connection()

    def _namespace(self, connection: ClusterConnection, manifest: Obj | None = None) -> str:
        return str(
            self.namespace
            or (manifest or {}).get("metadata", {}).get("namespace")
            or connection.namespace
            or "default"
        )

    # -- execution -------------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        self._context = context
        self._connection_info = self._connection()
        self._manifest = self.build_manifest(context)
        self._ns = self._namespace(self._connection_info, self._manifest)
        self._client = self._connection_info.client()
        try:
            self._client.create(
                self._manifest, namespace=self._ns, dry_run=True
            )  # fail fast, naming the field
        except (InvalidJobError, JobError) as exc:
            if "already exists" not in str(exc):
                raise AirflowException(str(exc)) from None
        if (
            ResumableJobMixin is not None
            and getattr(self, "durable", False)
            and context.get("task_state_store")
        ):
            return self.execute_resumable(context)
        return self._execute_searching_labels(context)

    def _execute_searching_labels(self, context: Any) -> Any:
        """Below Airflow 3.3 (or without durability): find a previous try's job by its labels."""
        previous = self._previous_by_labels(context)
        if previous is not None and not kinds.is_finished(previous):
            self.log.info(
                "reattaching to %s %s/%s started by an earlier try",
                previous["kind"],
                self._ns,
                previous["metadata"]["name"],
            )
            ref = _ref(previous)
        elif previous is not None and kinds.state(previous) == "Succeeded":
            self.log.info(
                "%s %s/%s already succeeded on an earlier try",
                previous["kind"],
                self._ns,
                previous["metadata"]["name"],
            )
            return self.get_job_result(_ref(previous), context)
        else:
            ref = self._submit(previous)
        self.poll_until_complete(ref, context)
        return self.get_job_result(ref, context)

    def _previous_by_labels(self, context: Any) -> Obj | None:
        selector = ",".join(f"{k}={v}" for k, v in task_identity(context).items())
        found = self._client.list(kind=self.kind, namespace=self._ns, label_selector=selector)
        return max(found, key=_attempt) if found else None

    def _submit(self, previous: Obj | None) -> dict[str, str]:
        """Submit the job, or the next attempt of a failed previous one (resuming from its checkpoints)."""
        if previous is not None:
            attempt = _attempt(previous) + 1
            self.log.info(
                "the earlier attempt %s failed (%s); submitting attempt %d with the same checkpoint "
                "dir, which resumes from %s",
                previous["metadata"]["name"],
                kinds.failure(previous)[0] or "Failed",
                attempt,
                (previous["metadata"].get("annotations") or {}).get(naming.ANNOTATION_LAST_CHECKPOINT)
                or "the latest checkpoint in that dir",
            )
            job = self._client.resubmit(previous, labels={LABEL_TRY: str(self._context["ti"].try_number)})
        else:
            job = self._client.create(self._manifest, namespace=self._ns)
            self.log.info("submitted %s %s/%s", job["kind"], self._ns, job["metadata"]["name"])
        ref = _ref(job)
        self._context["ti"].xcom_push(key=XCOM_JOB, value=ref)
        return ref

    # ResumableJobMixin (Airflow 3.3+) ----------------------------------------------------------
    def submit_job(self, context: Any) -> dict[str, str]:
        store = context.get("task_state_store")
        stored = store.get(self.external_id_key) if store is not None else None
        previous = self._client.get(stored["kind"], stored["name"], stored["namespace"]) if stored else None
        return self._submit(previous if previous is not None and kinds.state(previous) == "Failed" else None)

    def get_job_status(self, external_id: dict[str, str], context: Any) -> str:
        job = self._client.get(external_id["kind"], external_id["name"], external_id["namespace"])
        return "Missing" if job is None else kinds.state(job)

    def is_job_active(self, status: str) -> bool:
        return status in ("Pending", "Running", "Restarting", "Suspended")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "Succeeded"

    def poll_until_complete(self, external_id: dict[str, str], context: Any) -> None:
        self._context["ti"].xcom_push(key=XCOM_JOB, value=external_id)
        if not self.wait_for_completion:
            return
        if self.deferrable:
            self._defer(external_id, context)
        job = self._wait_in_worker(external_id)
        self._current = job

    def get_job_result(self, external_id: dict[str, str], context: Any) -> Obj:
        job = self._current or self._client.require(
            external_id["kind"], external_id["name"], external_id["namespace"]
        )
        result = self._result(job)
        self._finish(job)
        return result

    # -- waiting ---------------------------------------------------------------------------------
    def _wait_in_worker(self, ref: dict[str, str]) -> Obj:
        """Wait with a status line every ``status_interval`` seconds and rank 0's log in the task log."""
        client = self._client
        stop = threading.Event()
        follower = None
        if self.get_logs:
            current = client.require(ref["kind"], ref["name"], ref["namespace"])
            follower = threading.Thread(target=self._stream_logs, args=(current, stop), daemon=True)
            follower.start()
        latest: Obj | None = None
        try:
            while True:
                for job in client.watch(
                    ref["kind"], ref["name"], ref["namespace"], timeout=self.status_interval
                ):
                    latest = job
                    if self._killed or kinds.is_finished(job):
                        break
                if latest is None:
                    raise AirflowException(f"{ref['kind']} {ref['namespace']}/{ref['name']} disappeared")
                self.log.info("%s", status_line(latest))
                if kinds.state(latest) == "Pending":
                    for reason in client.pending_reasons(latest):
                        self.log.warning("pod not scheduled: %s", reason)
                if self._killed:
                    raise AirflowException(
                        f"the task was killed; the job was handled per on_kill_action ({self.on_kill_action})"
                    )
                if kinds.is_finished(latest):
                    break
        finally:
            stop.set()
            if follower is not None:
                follower.join(5)
        try:
            return client.check(latest)
        except JobFailedError as exc:
            self._finish(latest)
            raise AirflowException(str(exc)) from None

    def _stream_logs(self, job: Obj, stop: threading.Event) -> None:
        try:
            for line in self._client.follow_logs(job):
                self.log.info("[%s] %s", _rank0_name(job), line)
                if stop.is_set():
                    return
        except Exception as exc:  # logs are a convenience: never fail the task over them
            self.log.warning("stopped streaming logs: %s", exc)

    def _defer(self, ref: dict[str, str], context: Any) -> None:
        deadline = None
        timeout = None
        if self.execution_timeout:
            started = context["ti"].start_date or dt.datetime.now(dt.UTC)
            deadline = (started + self.execution_timeout).timestamp()
            timeout = max(dt.timedelta(seconds=1), dt.timedelta(seconds=deadline - time.time()))
        self.defer(
            trigger=JobTrigger(
                kind=ref["kind"],
                name=ref["name"],
                namespace=ref["namespace"],
                connection=self._connection_info.to_dict(),
                deadline=deadline,
                status_interval=self.status_interval,
                on_kill_action=self.on_kill_action,
                get_logs=self.get_logs,
            ),
            method_name="execute_complete",
            timeout=timeout,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Obj:
        """Resume after the trigger: return the result, or fail with the job's reason and log tail."""
        self._connection_info = self._connection()
        self._client = self._connection_info.client()
        status = event.get("status")
        if event.get("logs"):
            self.log.info("last lines of rank 0's log:\n%s", event["logs"])
        if status == "success":
            job = event["job"]
            result = self._result(job)
            self._finish(job)
            return result
        if status == "failed":
            job = event["job"]
            self._finish(job)
            raise AirflowException(
                str(
                    JobFailedError(
                        event["name"],
                        event.get("reason", ""),
                        event.get("message", ""),
                        event.get("logs", ""),
                    )
                )
            )
        if status == "timeout":
            self._kill_job(event["kind"], event["name"], event["namespace"])
        raise AirflowException(event.get("message") or f"the trigger ended with {status!r}")

    # -- results and cleanup ---------------------------------------------------------------------
    def _result(self, job: Obj) -> Obj:
        report = JobClient.report(job)
        annotations = job["metadata"].get("annotations") or {}
        return {
            "kind": job["kind"],
            "name": job["metadata"]["name"],
            "namespace": job["metadata"]["namespace"],
            "uid": job["metadata"].get("uid"),
            "state": kinds.state(job),
            "attempt": int(annotations.get(naming.ANNOTATION_ATTEMPT, "1") or 1),
            "last_checkpoint": annotations.get(naming.ANNOTATION_LAST_CHECKPOINT)
            or report.get("last_checkpoint"),
            "metrics": report.get("metrics") or {},
            "report": report,
        }

    def _finish(self, job: Obj) -> None:
        succeeded = kinds.state(job) == "Succeeded"
        if self.on_finish_action == "delete" or (self.on_finish_action == "delete_succeeded" and succeeded):
            self._client.delete(job["kind"], job["metadata"]["name"], job["metadata"]["namespace"])
            self.log.info(
                "deleted %s %s (on_finish_action=%s)",
                job["kind"],
                job["metadata"]["name"],
                self.on_finish_action,
            )

    def _kill_job(self, kind: str, name: str, namespace: str) -> None:
        if self.on_kill_action == "keep":
            return
        client = getattr(self, "_client", None) or self._connection().client()
        if self.on_kill_action == "suspend":
            client.set_suspended(kind, name, namespace, True)
        else:
            client.delete(kind, name, namespace)
        self.log.info("%s %s/%s: %s (on_kill_action)", kind, namespace, name, self.on_kill_action)

    def on_kill(self) -> None:
        """The task was killed: stop its job as ``on_kill_action`` says, and make sure the task fails."""
        self._killed = True
        ref = None
        with contextlib.suppress(Exception):  # no context or no XCom yet: fall back to the manifest
            ref = self._context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_JOB)
        if ref is None and getattr(self, "_manifest", None) is not None:
            ref = {
                "kind": self._manifest["kind"],
                "name": self._manifest["metadata"]["name"],
                "namespace": self._ns,
            }
        if ref is not None:
            self._kill_job(ref["kind"], ref["name"], ref["namespace"])


class PyTorchJobOperator(TrainingJobOperator):
    """Run a PyTorchJob (a Master and ``num_workers`` Workers) and wait for it; see ``TrainingJobOperator``."""

    default_kind = "PyTorchJob"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("kind", "PyTorchJob")
        if kwargs["kind"] != "PyTorchJob":
            raise ValueError("PyTorchJobOperator runs PyTorchJobs; use TrainingJobOperator for other kinds")
        super().__init__(**kwargs)


class TrainJobOperator(TrainingJobOperator):
    """Run a TrainJob on a (Cluster)TrainingRuntime and wait for it; see ``TrainingJobOperator``."""

    default_kind = "TrainJob"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("kind", "TrainJob")
        if kwargs["kind"] != "TrainJob":
            raise ValueError("TrainJobOperator runs TrainJobs; use TrainingJobOperator for other kinds")
        super().__init__(**kwargs)


def _ref(job: Obj) -> dict[str, str]:
    meta = job["metadata"]
    return {
        "kind": job["kind"],
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta.get("uid", ""),
    }


def _attempt(job: Obj) -> int:
    return int((job["metadata"].get("annotations") or {}).get(naming.ANNOTATION_ATTEMPT, "1") or 1)


def _rank0_name(job: Obj) -> str:
    return f"{job['metadata']['name']} rank 0"


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value
