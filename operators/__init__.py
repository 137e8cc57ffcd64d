"""The kubetrain Airflow provider (imported as ``kubetrain.operators``).

Operators that submit and wait for training jobs (``PyTorchJobOperator``,
``TrainJobOperator``, ``TrainingJobOperator``), sensors, and the deferrable
trigger they share. Import from here::

    from kubetrain.operators import PyTorchJobOperator, PyTorchJobSensor

Names are imported when first used: Airflow loads this package's provider info
while it is still configuring itself, before operators can be imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "PyTorchJobOperator": "operators",
    "TrainJobOperator": "operators",
    "TrainingJobOperator": "operators",
    "PyTorchJobSensor": "sensors",
    "TrainJobSensor": "sensors",
    "TrainingJobSensor": "sensors",
    "JobTrigger": "triggers",
}

__all__ = [
    "JobTrigger",
    "PyTorchJobOperator",
    "PyTorchJobSensor",
    "TrainJobOperator",
    "TrainJobSensor",
    "TrainingJobOperator",
    "TrainingJobSensor",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kubetrain.operators' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kubetrain.operators.{_WHERE[name]}"), name)
