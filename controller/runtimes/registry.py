"""The v1 frameworks by kind."""

from __future__ import annotations

from kubetrain.api import kinds
from kubetrain.controller.runtimes.framework import Framework
from kubetrain.controller.runtimes.jax import Jax
from kubetrain.controller.runtimes.paddle import Paddle
from kubetrain.controller.runtimes.pytorch import PyTorch
from kubetrain.controller.runtimes.tensorflow import TensorFlow
from kubetrain.controller.runtimes.xgboost import XGBoost

FRAMEWORKS: dict[str, Framework] = {
    f.api.singular: f for f in (PyTorch(), TensorFlow(), XGBoost(), Paddle(), Jax())
}


def by_name(name: str) -> Framework:
    """Look up a framework by any name of its kind, case-insensitively (``pytorchjob``, ``TFJob``, ``ptj``...)."""
    return FRAMEWORKS[kinds.v1_kind(name).singular]
