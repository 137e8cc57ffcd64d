"""How the operators' templates render: into values only, never into structure or control keys.

A task's templates take text from people who can trigger a DAG run but not edit the DAG
(``dag_run.conf``, params it overrides, XComs). Rendered as Airflow renders by default, a value could
become structure: YAML text of a manifest closing its quotes, or, with
``render_template_as_native_obj=True``, a mapping or list where the DAG author wrote one value. So
every template field is rendered leaf by leaf: keys stay as written, and each templated string must
render into one value (text, a number, a boolean). The only structure a template may produce is a
list of values for ``command`` / ``args``, which holds nothing but arguments. A ``job`` that is one
template expression as a whole is a manifest a task built; it may still not set the ``kubetrain.dev/``
annotations and labels that steer the controller (checkpoint volume, credentials Secret, resume
point): those come from the operator's own arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from kubetrain import naming
from kubetrain.client.errors import InvalidJobError

Obj = dict[str, Any]
JINJA_MARKERS = ("{{", "{%", "{#")
LIST_FIELDS = frozenset({"command", "args"})  # a whole template may render into a list of values
CONTROL_PREFIX = naming.ANNOTATION_CHECKPOINT_DIR.split("/", 1)[0] + "/"


def parse_manifest_text(text: str) -> Obj:
    """A manifest from YAML (or JSON) text, read before any template in it is rendered."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise InvalidJobError(
            f"job is not valid YAML before its templates are rendered ({problem}); quote each templated "
            'value, e.g. image: "{{ params.image }}": a template renders into one value of the manifest, '
            "never into its structure"
        ) from None
    if not isinstance(loaded, dict):
        raise InvalidJobError("job must be a manifest: a mapping with apiVersion, kind, metadata and spec")
    return loaded


def is_whole_template(text: str) -> bool:
    """``job`` is one template expression, e.g. ``{{ ti.xcom_pull('build_manifest') }}``: the whole
    manifest comes from it (a task built it), so it is rendered as a whole."""
    stripped = text.strip()
    return (
        stripped.startswith("{{")
        and stripped.endswith("}}")
        and stripped.count("{{") == 1
        and "{%" not in stripped
    )


def _is_value(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _refuse_structure(where: str, template: str, value: Any, allowed: str) -> None:
    raise InvalidJobError(
        f"{where}: the template {template!r} rendered into a {type(value).__name__}; a templated "
        f"value renders into {allowed}, never into YAML structure"
    )


def render_manifest_leaves(
    template: Any,
    render: Callable[[str], Any],
    where: str = "job",
    *,
    resolve: Callable[[Any], Any] | None = None,
) -> Any:
    """Render each templated string value of a parsed manifest with ``render``; keys stay as written.

    A rendered value must stay one value (text, a number, a boolean): one that became a mapping or a
    list (a DAG that renders native objects can do that) is refused, so nothing a template inserts,
    ``dag_run.conf`` included, can add structure such as ``securityContext`` or ``hostPath``. Other
    leaves (an ``XComArg`` a DAG put in a list) go through ``resolve`` when given."""
    if isinstance(template, str):
        if not any(marker in template for marker in JINJA_MARKERS):
            return template
        value = render(template)
        if not _is_value(value):
            _refuse_structure(where, template, value, "one value (text, a number, a boolean)")
        return value
    if isinstance(template, Mapping):
        return {
            key: render_manifest_leaves(value, render, f"{where}.{key}", resolve=resolve)
            for key, value in template.items()
        }
    if isinstance(template, list | tuple):
        return [
            render_manifest_leaves(item, render, f"{where}[{i}]", resolve=resolve)
            for i, item in enumerate(template)
        ]
    return template if resolve is None or _is_value(template) else resolve(template)


def render_field(
    field: str, content: Any, render: Callable[[str], Any], resolve: Callable[[Any], Any]
) -> Any:
    """One template field other than ``job``, rendered value by value (see the module's docstring)."""
    if (
        field in LIST_FIELDS
        and isinstance(content, str)
        and any(marker in content for marker in JINJA_MARKERS)
    ):
        value = render(content)
        if isinstance(value, list | tuple) and all(_is_value(item) for item in value):
            return list(value)
        if not _is_value(value):
            _refuse_structure(field, content, value, "one value or a list of values")
        return value
    return render_manifest_leaves(content, render, field, resolve=resolve)


def refuse_control_keys(manifest: Obj, where: str = "job") -> Obj:
    """``manifest`` when its metadata sets no ``kubetrain.dev/`` annotation or label, else a clear error:
    a manifest rendered whole from a template must not steer the controller (checkpoint volume and
    credentials, the resume point); the operator's own arguments set those."""
    metadata = manifest.get("metadata")
    for part in ("annotations", "labels"):
        keys = (metadata.get(part) if isinstance(metadata, Mapping) else None) or {}
        control = sorted(key for key in keys if str(key).startswith(CONTROL_PREFIX))
        if control:
            raise InvalidJobError(
                f"{where}.metadata.{part}: {', '.join(control)} came from a template (the whole manifest "
                f"was rendered from one expression); {CONTROL_PREFIX}* keys steer the controller and are "
                "set by the operator's arguments (checkpoint_dir, checkpoint_volume, checkpoint_secret, "
                "ttl_seconds_after_finished, ...) or written in the DAG, never rendered"
            )
    return manifest
