"""What a training operator submits: its arguments, checked when the DAG is parsed, and the manifest.

The manifest is the one given (a dict, YAML text or a file, rendered value by value so that no
templated value adds structure: ``operators.templating``) or one built from the convenience
arguments (``kubetrain.client.builders``), labelled with the task instance's identity
(``operators.identity``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from kubetrain import naming
from kubetrain.api.kinds import v1_kind
from kubetrain.client import builders, kinds
from kubetrain.client.builders import JobSpec
from kubetrain.client.errors import InvalidJobError
from kubetrain.operators import templating
from kubetrain.operators.compat import AirflowException
from kubetrain.operators.identity import LABEL_TRY, derived_name, task_identity

if TYPE_CHECKING:
    from kubetrain.operators.compat import BaseOperator as _Operator
else:
    _Operator = object

Obj = dict[str, Any]
ON_FINISH = ("delete", "delete_succeeded", "keep")
ON_KILL = ("delete", "suspend", "keep")


class ManifestMixin(_Operator):
    """The arguments and manifest of ``TrainingJobOperator`` (which sets these attributes)."""

    kind: str
    _kind_given: bool
    job: Obj | str | None
    name: str | None
    image: str | None
    command: Sequence[str] | None
    args: Sequence[str] | None
    num_workers: int
    num_nodes: int | None
    gpus: int
    env: Mapping[str, Any] | Sequence[Obj] | None
    checkpoint_dir: str | None
    checkpoint_volume: str | None
    checkpoint_secret: str | None
    ttl_seconds_after_finished: int | None
    active_deadline_seconds: int | None
    backoff_limit: int | None
    stall_timeout_seconds: int | None
    clean_pod_policy: str | None
    restart_policy: str
    runtime: str | None
    scheduling: Mapping[str, Any] | None
    queue_name: str | None
    priority_class: str | None
    node_selector: Mapping[str, str] | None
    tolerations: Sequence[Obj] | None
    working_dir: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    status_interval: float
    on_finish_action: str
    on_kill_action: str

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
            if isinstance(self.job, str) and "\n" in self.job and not templating.is_whole_template(self.job):
                templating.parse_manifest_text(
                    self.job
                )  # a manifest that only parses once rendered is refused now
        elif not self.image and not _templated(self.image):
            raise ValueError("image is required when no job manifest is given")
        if self.kind == "TrainJob" and self.job is None and not self.runtime:
            raise ValueError("runtime is required for a TrainJob, e.g. runtime='torch-distributed'")

    def _check_queue(self) -> None:
        """``queue_name`` and ``priority_class`` name Kueue objects: checked when the DAG is parsed unless
        templated (then when the task runs)."""
        if _templated(self.queue_name) or _templated(self.priority_class):
            return
        try:
            builders.queue_labels(self.queue_name, self.priority_class)
        except InvalidJobError as exc:
            raise ValueError(str(exc)) from None

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
                checkpoint_secret=self.checkpoint_secret,
                ttl_seconds_after_finished=self.ttl_seconds_after_finished,
                active_deadline_seconds=self.active_deadline_seconds,
                backoff_limit=self.backoff_limit,
                stall_timeout_seconds=self.stall_timeout_seconds,
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
            {
                **builders.queue_labels(self.queue_name, self.priority_class),
                **task_identity(context),
                LABEL_TRY: str(context["ti"].try_number),
            }
        )
        meta["labels"].setdefault(naming.LABEL_LINEAGE, meta["name"])
        meta.setdefault("annotations", {}).setdefault(naming.ANNOTATION_ATTEMPT, "1")
        return body

    def _replicas(self) -> dict[str, int]:
        leaders = v1_kind(
            self.kind
        ).leaders  # Workers alone can run the job, unless they cannot decide success
        first = {} if "Worker" in leaders else {leaders[0]: 1}
        return {**first, "Worker": self.num_workers}

    @staticmethod
    def _load_manifest(job: Obj | str) -> Obj:
        if isinstance(job, Mapping):
            return dict(job)
        text = job
        if "\n" not in job and Path(job).suffix in (".yaml", ".yml", ".json") and Path(job).exists():
            text = Path(job).read_text()
        return templating.parse_manifest_text(text)

    def render_template(
        self,
        content: Any,
        context: Any,
        jinja_env: jinja2.Environment | None = None,
        seen_oids: set[int] | None = None,
    ) -> Any:
        """Airflow renders every template field through here (mapped tasks too), each value by value
        (``operators.templating``): ``job`` is parsed first, then its values rendered; no template
        renders into structure."""
        field = self._template_field_holding(content)
        if field is None or not isinstance(content, str | Mapping | list | tuple):
            return super().render_template(content, context, jinja_env, seen_oids)
        env = jinja_env or self.get_template_env()

        def render(text: str) -> Any:
            # Airflow's own rendering of one string: text, or native objects when the DAG asks for them.
            return self._render(env.from_string(text), context)

        def resolve(value: Any) -> Any:  # an XComArg or another object a DAG put in a field's list
            return super(ManifestMixin, self).render_template(value, context, jinja_env, seen_oids)

        if field != "job":
            return templating.render_field(field, content, render, resolve)
        if isinstance(content, str) and templating.is_whole_template(content):
            whole = render(content)
            manifest = (
                dict(whole) if isinstance(whole, Mapping) else templating.parse_manifest_text(str(whole))
            )
            return templating.refuse_control_keys(manifest)
        template = (
            templating.parse_manifest_text(self._manifest_source(content, env))
            if isinstance(content, str)
            else content
        )
        return templating.render_manifest_leaves(template, render, resolve=resolve)

    def _template_field_holding(self, content: Any) -> str | None:
        """The template field whose value ``content`` is (Airflow passes values, not names)."""
        return next((name for name in self.template_fields if getattr(self, name, None) is content), None)

    def _manifest_source(self, job: str, env: jinja2.Environment) -> str:
        """The text of ``job``: itself, or the file it names, looked up as Airflow looks up template files
        (the DAG's folder and ``template_searchpath``), else as a path."""
        if "\n" in job or not job.endswith(tuple(self.template_ext)):
            return job
        if env.loader is not None:
            with contextlib.suppress(jinja2.TemplateNotFound):
                source: str = env.loader.get_source(env, job)[0]
                return source
        if Path(job).is_file():
            return Path(job).read_text()
        raise InvalidJobError(f"job: no manifest file {job!r} in the DAG folder or template_searchpath")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value
