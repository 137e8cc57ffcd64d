"""Where the example DAGs run their training: the local cluster's process node, unless told otherwise.

Every example passes ``example_dag()`` to ``@dag``: its ``default_args`` give each kubetrain task the
namespace, the image and the placement, so a DAG's tasks say only what they train (Airflow hands a
task the ``default_args`` its operator takes, and nothing else).

Set ``KUBETRAIN_TARGET=cluster`` to run the same DAGs on a real cluster (the
process-node placement and the repository working directory are then left out).
``KUBETRAIN_NAMESPACE`` picks the namespace (default ``default``), ``KUBETRAIN_IMAGE`` the image.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = os.environ.get("KUBETRAIN_NAMESPACE", "default")
IMAGE = os.environ.get("KUBETRAIN_IMAGE", "kubetrain/kubetrain:0.1.0")
TRAIN = ["python", "examples/train_ddp.py"]


def example_dag() -> dict[str, Any]:
    """``@dag`` arguments every example shares: run by hand (or by the tests), never scheduled; its
    tasks train in ``NAMESPACE`` from ``IMAGE``, placed by ``placement()``."""
    return {
        "schedule": None,
        "start_date": dt.datetime(2026, 1, 1),
        "catchup": False,
        "tags": ["kubetrain", "example"],
        "default_args": {"namespace": NAMESPACE, "image": IMAGE, **placement()},
    }


def placement() -> dict[str, Any]:
    """Operator arguments that put the pods on the process node of the local cluster."""
    if os.environ.get("KUBETRAIN_TARGET", "local") != "local":
        return {}
    return {
        "node_selector": {"kubetrain.dev/process-node": "true"},
        "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}],
        "working_dir": str(REPO),
    }
