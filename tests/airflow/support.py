"""What the Airflow tests share to drive an operator without a scheduler: a task instance, and
``execute`` as a worker calls it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from kubetrain.operators.compat import AIRFLOW_V_3_0_PLUS

if AIRFLOW_V_3_0_PLUS:
    from airflow.sdk.exceptions import TaskDeferred
else:
    from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]


@dataclass
class FakeTaskInstance:
    """What the operators read of a task instance: the identity that names and labels its job, when it
    started, and its XComs."""

    dag_id: str = "tests"
    task_id: str = "train"
    run_id: str = "manual__1"
    map_index: int = -1
    try_number: int = 1
    start_date: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def xcom_pull(
        self, task_ids: str | None = None, key: str = "return_value", map_indexes: int | None = None
    ) -> Any:
        return self.xcoms.get(key)


def task_context(**task_instance: Any) -> dict[str, Any]:
    """The context of a task run: ``ti`` with these fields."""
    return {"ti": FakeTaskInstance(**task_instance)}


def execute(op: Any, context: dict[str, Any]) -> Any:
    """``op.execute(context)`` as a worker calls it, outside Airflow's task runner."""
    if not AIRFLOW_V_3_0_PLUS:  # Airflow 2 guards execute() with a per-thread record of callers
        from airflow.models.baseoperator import ExecutorSafeguard

        ExecutorSafeguard._sentinel.callers = {}
    return op.execute(context)


def deferred_trigger(op: Any, context: dict[str, Any]) -> Any:
    """Run the task until it defers; the trigger it defers to."""
    with pytest.raises(TaskDeferred) as deferred:
        execute(op, context)
    return deferred.value.trigger


async def first_event(trigger: Any) -> dict[str, Any]:
    """The first event the trigger fires, as ``execute_complete`` receives it."""
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")
