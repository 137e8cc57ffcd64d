"""Operators that run a training job and wait for it: PyTorchJob, TrainJob, and the other v1 kinds.

Each task submits one job (a full manifest, or one built from convenience
arguments, checked before anything is submitted) and waits for it, in the
worker with status lines and rank 0's log streamed into the task log, or
deferred to the triggerer (``deferrable=True``).

Identity and retries. Every try of one task instance belongs to one lineage
(``kubetrain.client.lineage``, the rules the KFP launchers and ``kubetrain
resume`` share): its jobs are found by a hash of the task instance's full
identity (DAG, task, run, map index), never by the readable labels, which lose
characters. A job that is still running is reattached to, a suspended one
resumed; one that succeeded is returned without running again (unless
``rerun_on_clear`` and the task is run again after it returned); one that
**failed is never reattached to**: the next attempt is submitted with the same
checkpoint dir and lineage and ``attempt + 1``, once the failed one's pods are
gone, so training resumes from its last checkpoint.

Cancellation: ``on_kill`` (and the trigger's ``on_kill`` on 3.3+) deletes or
suspends this task instance's job only (``on_kill_action``); after a normal finish ``on_finish_action``
deletes it, deletes it only when it succeeded, or keeps it (the default; set
``ttl_seconds_after_finished`` to let the controller clean up).

The operator's concerns live beside it: ``identity`` (which task instance a job belongs to),
``manifests`` (the arguments and the manifest), ``waiting`` (in the worker or deferred), and
``kubetrain.client.attempt`` (the wait, the result and its delivery, shared with the KFP launchers and
the CLI). What stays here is the task's course -- submit or reattach, wait, return, clean up -- and
the check that a deletion does not take the checkpoints' claim with the job.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiException

from kubetrain import naming
from kubetrain.api import v2
from kubetrain.api.kinds import CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME
from kubetrain.client import AsyncJobClient, JobFailedError, attempt, kinds, lineage
from kubetrain.client.errors import InvalidJobError, JobError, LineageError
from kubetrain.operators.compat import AirflowException, BaseOperator, ResumableJobMixin, conf
from kubetrain.operators.hooks import ClusterConnection, KubetrainHook
from kubetrain.operators.identity import XCOM_JOB, job_ref, task_lineage
from kubetrain.operators.links import TrainingJobLink
from kubetrain.operators.manifests import ManifestMixin
from kubetrain.operators.waiting import WaitingMixin
from kubetrain.trainjob import build as trainjob_runtime
from kubetrain.trainjob.outputs import (
    ClaimMount,
    claim_mounts,
    output_deleted_with_job,
    output_paths,
)
from kubetrain.trainjob.state import BuildError

Obj = dict[str, Any]

_Bases: tuple[type, ...] = (
    (ManifestMixin, WaitingMixin, ResumableJobMixin, BaseOperator)
    if ResumableJobMixin is not None
    else (ManifestMixin, WaitingMixin, BaseOperator)
)


# -- outputs that outlive their job ---------------------------------------------------------------------
def trainer_claim_mounts(trainjob: Obj, runtime: Obj) -> list[ClaimMount]:
    """The claims a TrainJob's trainer pods mount on ``runtime``, resolved as the controller resolves them
    (``outputs.claim_mounts``). Raises ``BuildError`` when the TrainJob does not fit the runtime."""
    job = copy.deepcopy(trainjob)
    meta = job.setdefault("metadata", {})
    meta.setdefault("uid", "")  # only owner references read it
    meta.setdefault("namespace", "")
    return claim_mounts(trainjob_runtime.build(job, runtime))


async def _live_runtime(aio: AsyncJobClient, trainjob: Obj, namespace: str) -> Obj | None:
    """The (Cluster)TrainingRuntime a TrainJob names; None when it cannot be read (yet)."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    name = ref.get("name")
    if not name:
        return None
    try:
        found: Obj
        if (ref.get("kind") or "ClusterTrainingRuntime") == "TrainingRuntime":
            found = await aio.custom.get_namespaced_custom_object(
                v2.GROUP, v2.VERSION, namespace, TRAINING_RUNTIME.plural, name
            )
        else:
            found = await aio.custom.get_cluster_custom_object(
                v2.GROUP, v2.VERSION, CLUSTER_TRAINING_RUNTIME.plural, name
            )
    except ApiException as exc:
        if exc.status in (403, 404):
            return None
        raise
    return found


async def _runtime_ran_on(aio: AsyncJobClient, trainjob: Obj) -> Obj | None:
    """The runtime a TrainJob ran on: the controller's snapshot of it, else the live runtime."""
    meta = trainjob["metadata"]
    with contextlib.suppress(ApiException):
        listed = await aio.core.list_namespaced_config_map(
            meta["namespace"], label_selector=f"{naming.TRAINJOB_RUNTIME_SNAPSHOT}={meta['name']}"
        )
        for snapshot in listed.items:
            owners = snapshot.metadata.owner_references or []
            text = (snapshot.data or {}).get("runtime")
            if text and any(owner.uid == meta.get("uid") for owner in owners):
                runtime = yaml.safe_load(text)
                if isinstance(runtime, dict):
                    return runtime
    return await _live_runtime(aio, trainjob, meta["namespace"])


class TrainingJobOperator(*_Bases):  # type: ignore[misc]
    """Run a Kubeflow training job (any kind) and wait for it.

    :param kind: PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob or TrainJob.
    :param job: a full manifest: a dict, a YAML string, or a path to a ``.yaml``/``.json`` file. Templated
        value by value: parsed first, then each string value rendered on its own (keys never), so no
        templated value adds structure; quote templated values in YAML.
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
    :param checkpoint_dir: where checkpoints live (opts in to checkpoint-aware resume): a path in the pods,
        or an object-store URL such as ``s3://bucket/prefix``.
    :param checkpoint_volume: a PersistentVolumeClaim mounted at ``checkpoint_dir`` on every replica.
    :param checkpoint_secret: a Secret whose keys become every training container's env (the credentials
        of an object-store ``checkpoint_dir``); referenced by name, never copied into the job.
    :param ttl_seconds_after_finished: the controller deletes the job this long after it finished.
    :param active_deadline_seconds: the job fails once it has run this long.
    :param backoff_limit: restarts allowed before the job fails (v1 kinds).
    :param stall_timeout_seconds: restart the job's pods when no progress report came for this long.
    :param clean_pod_policy: None, Running or All (v1 kinds).
    :param restart_policy: OnFailure, Always, Never or ExitCode (v1 kinds).
    :param runtime: TrainJob: the ClusterTrainingRuntime (or TrainingRuntime) to run on.
    :param scheduling: gang scheduling: ``min_available``, ``queue``, ``priority_class``, ``schedule_timeout_seconds``.
    :param queue_name: the Kueue LocalQueue to create the job in (the ``kueue.x-k8s.io/queue-name`` label,
        with a manifest too): Kueue keeps the job suspended until its ClusterQueue has quota; the task's
        status lines say so, with Kueue's reason.
    :param priority_class: the Kueue WorkloadPriorityClass of the job (``kueue.x-k8s.io/priority-class``):
        what decides which queued job is admitted first and which running one Kueue may preempt.
    :param node_selector: node labels the pods need.
    :param tolerations: tolerations of the pods.
    :param labels: extra labels of the job.
    :param annotations: extra annotations of the job.
    :param kubernetes_conn_id: the ``kubernetes`` connection to use.
    :param deferrable: wait in the triggerer instead of the worker.
    :param get_logs: stream rank 0's log into the task log (and its tail on failure).
    :param status_interval: seconds between status lines in the task log.
    :param wait_for_completion: wait for the job (False: submit and return its identity).
    :param on_finish_action: delete, delete_succeeded or keep the job after it finished. A delete that
        would take along the claim holding the job's checkpoints (a TrainJob's own claim) is refused.
    :param on_kill_action: delete, suspend or keep the job when the task is killed.
    :param rerun_on_clear: a task cleared after it succeeded trains again (the lineage's next attempt)
        instead of returning the succeeded job's result.
    :param durable: Airflow 3.3+: also record the job in use in the task state store.
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
        "queue_name",
        "priority_class",
        "labels",
        "annotations",
    )
    template_ext: Sequence[str] = (".yaml", ".yml", ".json")
    template_fields_renderers = {"job": "yaml", "env": "json"}
    ui_color = "#c3dbf7"
    operator_extra_links = (TrainingJobLink(),)
    external_id_key = "kubetrain_job"
    default_kind = "PyTorchJob"
    only_default_kind = False  # True: the operator runs its default kind only (a manifest's must match)

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
        checkpoint_secret: str | None = None,
        ttl_seconds_after_finished: int | None = None,
        active_deadline_seconds: int | None = None,
        backoff_limit: int | None = None,
        stall_timeout_seconds: int | None = None,
        clean_pod_policy: str | None = None,
        restart_policy: str = "OnFailure",
        runtime: str | None = None,
        scheduling: Mapping[str, Any] | None = None,
        queue_name: str | None = None,
        priority_class: str | None = None,
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
        rerun_on_clear: bool = False,
        job_url_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        if self.only_default_kind and kind not in (None, self.default_kind):
            raise ValueError(
                f"{type(self).__name__} runs {self.default_kind}s; use TrainingJobOperator for other kinds"
            )
        if ResumableJobMixin is None:
            kwargs.pop("durable", None)
        super().__init__(**kwargs)
        self.kind = kinds.kind_of(kind or self.default_kind).kind
        self._kind_given = kind is not None or self.only_default_kind
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
        self.checkpoint_secret = checkpoint_secret
        self.ttl_seconds_after_finished = ttl_seconds_after_finished
        self.active_deadline_seconds = active_deadline_seconds
        self.backoff_limit = backoff_limit
        self.stall_timeout_seconds = stall_timeout_seconds
        self.clean_pod_policy = clean_pod_policy
        self.restart_policy = restart_policy
        self.runtime = runtime
        self.scheduling = scheduling
        self.queue_name = queue_name
        self.priority_class = priority_class
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
        self.rerun_on_clear = rerun_on_clear
        self.job_url_template = job_url_template
        self._killed = False
        self._current: Obj | None = None
        self._job_ref: dict[str, str] | None = None  # the job this task instance runs, once known
        self._check_arguments()
        self._check_queue()

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
        self._check_outputs_outlive_the_job()
        prepared = self._start_or_continue(context)
        ref = job_ref(prepared.job)
        if prepared.decision.action is lineage.Action.REATTACH and kinds.state(prepared.job) == "Succeeded":
            self._current = prepared.job  # an earlier try's job already succeeded: its result is ours
            return self.get_job_result(ref, context)
        self.poll_until_complete(ref, context)
        return self.get_job_result(ref, context)

    def lineage_request(self, context: Any) -> lineage.Request:
        """This task instance's lineage, for ``kubetrain.client.lineage``: its identity, the manifest to
        submit, and the name and lineage label of its first job (the ones ``build_manifest`` gave)."""
        meta = self._manifest["metadata"]
        return lineage.Request(
            identity=task_lineage(context),
            kind=self._manifest["kind"],
            namespace=self._ns,
            base_lineage=(meta.get("labels") or {}).get(naming.LABEL_LINEAGE) or meta["name"],
            spec_hash=lineage.spec_hash(self._manifest),
            template=self._manifest,
            first_name=meta["name"],
            rerun_succeeded=self.rerun_on_clear,
        )

    def _start_or_continue(self, context: Any) -> lineage.Prepared:
        """Reattach to, resume or submit this task instance's job, as its lineage's attempts say."""
        try:
            prepared = attempt.prepare(self._client, self.lineage_request(context), log=self.log.info)
        except LineageError as exc:
            raise AirflowException(str(exc)) from None
        ref = job_ref(prepared.job)
        self._job_ref = ref
        context["ti"].xcom_push(key=XCOM_JOB, value=ref)
        store = context.get("task_state_store") if getattr(self, "durable", False) else None
        if store is not None:  # Airflow 3.3+: recorded for tools; the lineage finds the job either way
            store.set(self.external_id_key, ref)
        if self._killed:  # on_kill ran while the job was being submitted
            self._kill_job(ref["kind"], ref["name"], ref["namespace"])
            raise AirflowException(
                f"the task was killed; the job was handled per on_kill_action ({self.on_kill_action})"
            )
        return prepared

    # ResumableJobMixin (Airflow 3.3+) ----------------------------------------------------------
    def submit_job(self, context: Any) -> dict[str, str]:
        return job_ref(self._start_or_continue(context).job)

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
        try:
            attempt.finish(self._client, job)
        except JobFailedError as exc:
            self._finish(job)
            raise AirflowException(str(exc)) from None
        self._current = job

    def get_job_result(self, external_id: dict[str, str], context: Any) -> Obj:
        job = self._current or self._client.require(
            external_id["kind"], external_id["name"], external_id["namespace"]
        )
        result = self._result(job)
        self._mark_delivered(job)
        self._finish(job)
        return result

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Obj:
        """Resume after the trigger: return the result, or fail with the job's reason and log tail."""
        self._connection_info = self._connection()
        self._client = self._connection_info.client()
        status = event.get("status")
        if event.get("logs"):
            self.log.info("last lines of %s's log:\n%s", event.get("logs_of", "rank 0"), event["logs"])
        if status == "success":
            job = event["job"]
            result = self._result(job)
            self._mark_delivered(job)
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
                        event.get("logs_of", "rank 0"),
                    )
                )
            )
        if status == "timeout":
            self._kill_job(event["kind"], event["name"], event["namespace"])
        raise AirflowException(event.get("message") or f"the trigger ended with {status!r}")

    # -- results and cleanup ---------------------------------------------------------------------
    def _result(self, job: Obj) -> Obj:
        """The task's return value (its ``return_value`` XCom): what the finished job reported."""
        result = attempt.Result.of(job)
        return {
            "kind": result.kind,
            "name": result.name,
            "namespace": result.namespace,
            "uid": result.uid,
            "state": result.state,
            "attempt": result.attempt,
            "last_checkpoint": result.last_checkpoint,
            "metrics": result.metrics,
            "report": result.report,
        }

    def _output_refusal(self, job: Obj, runtime: Obj | None, deleter: str | None = None) -> str | None:
        """Why ``deleter`` (``on_finish_action``, or the job's TTL) may not delete ``job``: the claim
        holding its output would go with it."""
        if job.get("kind") != "TrainJob" or runtime is None:
            return None
        deleter = deleter or f"on_finish_action={self.on_finish_action!r}"
        fix = (
            "remove the TTL"
            if deleter.startswith(naming.ANNOTATION_TTL_AFTER_FINISHED)
            else "set on_finish_action='keep'"
        )
        try:
            found = output_deleted_with_job(output_paths(job), trainer_claim_mounts(job, runtime))
        except BuildError:
            return None  # the controller fails such a job, naming the problem
        if found is None:
            return None
        path, claim = found
        return (
            f"{deleter} would delete TrainJob {job['metadata'].get('name')} "
            f"and with it the claim {claim}, which holds {path}: the runtime's volumeClaimPolicies delete "
            "that claim with the TrainJob (retentionPolicy.whenDeleted: Delete). Run on a runtime that "
            "retains it (whenDeleted: Retain, as the shipped torchtune runtimes do for their output claim), "
            f"or {fix}"
        )

    def _check_outputs_outlive_the_job(self) -> None:
        """Before submitting: refuse an ``on_finish_action`` or a TTL that would delete the checkpoints'
        claim with the job."""
        if self._manifest.get("kind") != "TrainJob":
            return
        ttl = (self._manifest["metadata"].get("annotations") or {}).get(naming.ANNOTATION_TTL_AFTER_FINISHED)
        deleters = [f"on_finish_action={self.on_finish_action!r}"] if self.on_finish_action != "keep" else []
        if ttl:
            deleters.append(f"{naming.ANNOTATION_TTL_AFTER_FINISHED}: {ttl}")
        if not deleters:
            return
        runtime = self._client.run(_live_runtime(self._client.aio, self._manifest, self._ns))
        for deleter in deleters:
            refusal = self._output_refusal(self._manifest, runtime, deleter)
            if refusal is not None:
                raise AirflowException(f"{refusal}; nothing was submitted")

    def _finish(self, job: Obj) -> None:
        succeeded = kinds.state(job) == "Succeeded"
        if self.on_finish_action == "delete" or (self.on_finish_action == "delete_succeeded" and succeeded):
            refusal = self._finish_refusal(job)
            if refusal is not None:
                if succeeded:  # the task's result points at that output: fail rather than lose it
                    raise AirflowException(f"{refusal}; the TrainJob was kept")
                self.log.warning("%s; the TrainJob was kept", refusal)
                return
            self._client.delete(job["kind"], job["metadata"]["name"], job["metadata"]["namespace"])
            self.log.info(
                "deleted %s %s (on_finish_action=%s)",
                job["kind"],
                job["metadata"]["name"],
                self.on_finish_action,
            )

    def _finish_refusal(self, job: Obj) -> str | None:
        if job.get("kind") != "TrainJob":
            return None
        live = self._client.get(job["kind"], job["metadata"]["name"], job["metadata"]["namespace"])
        if live is None:
            return None
        return self._output_refusal(live, self._client.run(_runtime_ran_on(self._client.aio, live)))

    def _mark_delivered(self, job: Obj) -> None:
        """With ``rerun_on_clear``: note on the job that this task returned its result, so a later run of
        the task instance knows it was cleared (train again), not retried after a lost worker (return it)."""
        if self.rerun_on_clear:
            attempt.mark_delivered(self._client, job)

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
        """The task was killed: stop its job as ``on_kill_action`` says, and make sure the task fails.

        Only this task instance's job (this map index's, on a mapped task): the one it submitted or
        reattached to, else the one it pushed to XCom for its own map index, checked to be its own."""
        self._killed = True
        ref = self._job_ref or self._pushed_ref()
        if ref is not None:
            self._kill_job(ref["kind"], ref["name"], ref["namespace"])

    def _pushed_ref(self) -> dict[str, str] | None:
        context = getattr(self, "_context", None)
        if context is None:
            return None
        ti = context["ti"]
        try:  # without map_indexes, Airflow 2 returns the first map index's value: another task's job
            ref = ti.xcom_pull(task_ids=self.task_id, key=XCOM_JOB, map_indexes=getattr(ti, "map_index", -1))
            client = getattr(self, "_client", None) or self._connection().client()
            job = client.get(ref["kind"], ref["name"], ref["namespace"]) if isinstance(ref, Mapping) else None
        except Exception:  # no XCom, no cluster: nothing this task can tell is its own
            return None
        if job is None or lineage.Identity.of_job(job) != task_lineage(context):
            return None
        return job_ref(job)


class PyTorchJobOperator(TrainingJobOperator):
    """Run a PyTorchJob (a Master and ``num_workers`` Workers) and wait for it; see ``TrainingJobOperator``."""

    default_kind = "PyTorchJob"
    only_default_kind = True


class TrainJobOperator(TrainingJobOperator):
    """Run a TrainJob on a (Cluster)TrainingRuntime and wait for it; see ``TrainingJobOperator``."""

    default_kind = "TrainJob"
    only_default_kind = True
