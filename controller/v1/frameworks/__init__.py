"""The Kubeflow v1 frameworks, one per kind: what differs between PyTorchJob, TFJob, XGBoostJob,
PaddleJob and JAXJob (``base.Framework`` gives the rules they share).

``FRAMEWORKS`` lists them; ``by_name`` finds one by any name of its kind.
"""

from __future__ import annotations

from kubetrain.api import kinds
from kubetrain.controller.frameworks.base import Framework
from kubetrain.controller.frameworks.jax import Jax
from kubetrain.controller.frameworks.paddle import Paddle
from kubetrain.controller.frameworks.pytorch import PyTorch
from kubetrain.controller.frameworks.tensorflow import TensorFlow
from kubetrain.controller.frameworks.xgboost import XGBoost

FRAMEWORKS: dict[str, Framework] = {
    f.api.singular: f for f in (PyTorch(), TensorFlow(), XGBoost(), Paddle(), Jax())
}


def by_name(name: str) -> Framework:
    """A framework by any name of its kind, case-insensitively (``pytorchjob``, ``TFJob``, ``ptj``...)."""
    return FRAMEWORKS[kinds.v1_kind(name).singular]
