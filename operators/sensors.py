"""Sensors that wait for a training job someone else started: poke, reschedule or deferrable."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from kubetrain.client import JobClient, JobFailedError, kinds
from kubetrain.operators.compat import AirflowException, BaseSensorOperator, PokeReturnValue, conf
from kubetrain.operators.hooks import KubetrainHook
from kubetrain.operators.triggers import JobTrigger, status_line


class TrainingJobSensor(BaseSensorOperator):
    """Wait until a training job finishes: done when it succeeded, failing the task when it failed.

    :param name: the job's name (templated; e.g. ``{{ ti.xcom_pull('train')['name'] }}``).
    :param namespace: its namespace (default: the connection's, else ``default``).
    :param kind: PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob or TrainJob.
    :param kubernetes_conn_id: the ``kubernetes`` connection to use.
    :param deferrable: wait in the triggerer instead of poking.
    """

    template_fields: Sequence[str] = ("name", "namespace")
    default_kind = "PyTorchJob"

    def __init__(
        self,
        *,
        name: str,
        namespace: str | None = None,
        kind: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.namespace = namespace
        self.kind = kinds.kind_of(kind or self.default_kind).kind
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable

    def _where(self) -> tuple[Any, str]:
        connection = KubetrainHook(conn_id=self.kubernetes_conn_id).cluster_connection()
        return connection, self.namespace or connection.namespace or "default"

    def poke(self, context: Any) -> PokeReturnValue | bool:
        connection, namespace = self._where()
        with connection.client() as client:
            job = client.get(self.kind, self.name, namespace)
            if job is None:
                raise AirflowException(f"{self.kind} {namespace}/{self.name} does not exist")
            self.log.info("%s", status_line(job))
            if not kinds.is_finished(job):
                return False
            try:
                client.check(job)
            except JobFailedError as exc:
                raise AirflowException(str(exc)) from None
            return PokeReturnValue(
                is_done=True,
                xcom_value={
                    "name": self.name,
                    "namespace": namespace,
                    "state": kinds.state(job),
                    "metrics": JobClient.report(job).get("metrics", {}),
                },
            )

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        _, namespace = self._where()
        self.defer(
            trigger=JobTrigger(
                kind=self.kind,
                name=self.name,
                namespace=namespace,
                kubernetes_conn_id=self.kubernetes_conn_id,  # the triggerer reads the connection itself
                on_kill_action="keep",
            ),
            method_name="execute_complete",
            # Airflow 2 takes only a timedelta here (Airflow 3 also a number of seconds); both keep
            # the sensor's timeout as seconds.
            timeout=dt.timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("status") == "success":
            job = event["job"]
            return {
                "name": self.name,
                "namespace": job["metadata"]["namespace"],
                "state": kinds.state(job),
                "metrics": JobClient.report(job).get("metrics", {}),
            }
        if event.get("status") == "failed":
            raise AirflowException(
                str(
                    JobFailedError(
                        self.name,
                        event.get("reason", ""),
                        event.get("message", ""),
                        event.get("logs", ""),
                        event.get("logs_of", "rank 0"),
                    )
                )
            )
        raise AirflowException(
            event.get("message") or f"waiting for {self.name} ended with {event.get('status')}"
        )


class PyTorchJobSensor(TrainingJobSensor):
    """Wait for a PyTorchJob; see ``TrainingJobSensor``."""

    default_kind = "PyTorchJob"


class TrainJobSensor(TrainingJobSensor):
    """Wait for a TrainJob; see ``TrainingJobSensor``."""

    default_kind = "TrainJob"
