"""Which task instance a job belongs to: its identity, its readable labels, its name, its reference.

Every try of one task instance (DAG, task, run, map index) belongs to one lineage
(``kubetrain.client.lineage``): its jobs are found by a hash of that full identity, never by the
readable labels, which lose characters. The job's reference (kind, name, namespace, uid) is what the
task pushes to XCom, records for Airflow 3.3's durable reattach and hands to the trigger.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kubetrain import naming
from kubetrain.client import lineage

Obj = dict[str, Any]
XCOM_JOB = "kubetrain_job"  # the XCom key of the job's reference
LABEL_DAG = naming.LABEL_DAG_ID
LABEL_TASK = naming.LABEL_TASK_ID
LABEL_RUN = naming.LABEL_RUN_ID
LABEL_MAP = naming.LABEL_MAP_INDEX
LABEL_TRY = naming.LABEL_TRY_NUMBER


def task_identity(context: Mapping[str, Any]) -> dict[str, str]:
    """Readable labels of a task instance's job (the try number separately), for people and kubectl.
    Label values lose characters, so retries never search by them: see ``task_lineage``."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    mapped = map_index is not None and map_index >= 0
    return {
        LABEL_DAG: naming.label_value(ti.dag_id),
        LABEL_TASK: naming.label_value(ti.task_id),
        LABEL_RUN: naming.label_value(ti.run_id),
        LABEL_MAP: str(map_index) if mapped else "none",
    }


def task_lineage(context: Mapping[str, Any]) -> lineage.Identity:
    """The full identity of a task instance: how every try finds the jobs of the ones before."""
    ti = context["ti"]
    return lineage.Identity.airflow(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))


def derived_name(context: Mapping[str, Any]) -> str:
    """``<task>-<hash of dag, task, run, map index>``: the same on every try of one task instance."""
    ti = context["ti"]
    digest = hashlib.sha1(f"{ti.dag_id}/{ti.task_id}/{ti.run_id}/{getattr(ti, 'map_index', -1)}".encode())
    return naming.dns_label(f"{ti.task_id}-{digest.hexdigest()[:8]}")


def job_ref(job: Obj) -> dict[str, str]:
    """The job's reference: what the task pushes to XCom and the trigger waits for."""
    meta = job["metadata"]
    return {
        "kind": job["kind"],
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta.get("uid", ""),
    }
