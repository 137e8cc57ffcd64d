"""Airflow 3 names with their Airflow 2 fallbacks, in one place.

The provider targets Airflow 3.3 (durable reattach through ``ResumableJobMixin``)
and runs on older versions with label-search reattach instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import airflow

_VERSION = tuple(int(part) for part in airflow.__version__.split(".")[:2] if part.isdigit())
AIRFLOW_V_3_0_PLUS = _VERSION >= (3, 0)
AIRFLOW_V_3_3_PLUS = _VERSION >= (3, 3)

# mypy checks the provider against Airflow 3's names (the Airflow 2 branch is for the runtime only).
if TYPE_CHECKING or AIRFLOW_V_3_0_PLUS:
    from airflow.sdk import BaseOperator, BaseOperatorLink, BaseSensorOperator, conf
    from airflow.sdk.bases.sensor import PokeReturnValue
    from airflow.sdk.exceptions import AirflowException
else:  # Airflow 2.x
    from airflow.configuration import conf  # type: ignore[no-redef]
    from airflow.exceptions import AirflowException  # type: ignore[no-redef]
    from airflow.models import BaseOperator, BaseOperatorLink  # type: ignore[no-redef]
    from airflow.sensors.base import BaseSensorOperator, PokeReturnValue  # type: ignore[no-redef]

try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 2
    from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

ResumableJobMixin: Any
try:
    from airflow.sdk import ResumableJobMixin
except ImportError:  # before Airflow 3.3: reattach falls back to a label search
    ResumableJobMixin = None

from airflow.triggers.base import BaseTrigger, TriggerEvent  # noqa: E402  (same path on 2 and 3)

__all__ = [
    "AIRFLOW_V_3_0_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowException",
    "BaseOperator",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "BaseTrigger",
    "DagBag",
    "PokeReturnValue",
    "ResumableJobMixin",
    "TriggerEvent",
    "conf",
]
