"""The task's link to its training job (in a dashboard of your choice)."""

from __future__ import annotations

from typing import Any

from kubetrain.client import kinds
from kubetrain.operators.compat import BaseOperatorLink, conf
from kubetrain.operators.identity import XCOM_JOB


class TrainingJobLink(BaseOperatorLink):
    """Links to the job, from ``job_url_template`` (operator) or ``[kubetrain] job_url_template`` (config).

    The template may use ``{kind}``, ``{plural}``, ``{group}``, ``{version}``, ``{namespace}`` and ``{name}``,
    e.g. ``https://dashboard.example.com/#/customresource/{plural}.{group}/{namespace}/{name}``.
    """

    name = "Training job"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        template = getattr(operator, "job_url_template", None) or conf.get(
            "kubetrain", "job_url_template", fallback=""
        )
        if not template:
            return ""
        ref = _job_ref(ti_key)
        if not ref:
            return ""
        kind = kinds.kind_of(ref["kind"])
        return str(template).format(
            kind=kind.kind,
            plural=kind.plural,
            group=kind.group,
            version=kind.version,
            namespace=ref["namespace"],
            name=ref["name"],
        )


def _job_ref(ti_key: Any) -> dict[str, str] | None:
    try:
        from airflow.sdk.execution_time.xcom import XCom
    except ImportError:  # Airflow 2
        from airflow.models import XCom
    value = XCom.get_value(ti_key=ti_key, key=XCOM_JOB)
    return value if isinstance(value, dict) else None
