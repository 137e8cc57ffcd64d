"""The v1 frameworks by kind."""

from __future__ import annotations

from kubetrain.controller.runtimes.framework import Framework
from kubetrain.controller.runtimes.jax import Jax
from kubetrain.controller.runtimes.paddle import Paddle
from kubetrain.controller.runtimes.pytorch import PyTorch
from kubetrain.controller.runtimes.tensorflow import TensorFlow
from kubetrain.controller.runtimes.xgboost import XGBoost

FRAMEWORKS: dict[str, Framework] = {
    f.kind.lower(): f for f in (PyTorch(), TensorFlow(), XGBoost(), Paddle(), Jax())
}


def by_name(name: str) -> Framework:
    """Look up a framework by kind name, case-insensitively (``pytorchjob``, ``TFJob``...)."""
    try:
        return FRAMEWORKS[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown job kind {name!r}; choose from {', '.join(f.kind for f in FRAMEWORKS.values())}"
        ) from None
