"""Where the example DAGs run their training: the local cluster's process node, unless told otherwise.

Set ``KUBETRAIN_TARGET=cluster`` to run the same DAGs on a real cluster (the
process-node placement and the repository working directory are then left out).
``KUBETRAIN_NAMESPACE`` picks the namespace (default ``default``).
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
    """``@dag`` arguments every example shares: run by hand (or by the tests), never scheduled."""
    return {
        "schedule": None,
        "start_date": dt.datetime(2026, 1, 1),
        "catchup": False,
        "tags": ["kubetrain", "example"],
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
