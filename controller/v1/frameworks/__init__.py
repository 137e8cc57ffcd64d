"""The Kubeflow v1 frameworks, one per kind: what differs between PyTorchJob, TFJob, XGBoostJob,
PaddleJob and JAXJob (``base.Framework`` gives the rules they share).

``FRAMEWORKS`` lists them; ``by_name`` finds one by any name of its kind.
"""

from __future__ import annotations

from kubetrain.api import kinds
from kubetrain.controller.v1.frameworks.base import Framework
from kubetrain.controller.v1.frameworks.jax import Jax
from kubetrain.controller.v1.frameworks.paddle import Paddle
from kubetrain.controller.v1.frameworks.pytorch import PyTorch
from kubetrain.controller.v1.frameworks.tensorflow import TensorFlow
from kubetrain.controller.v1.frameworks.xgboost import XGBoost

FRAMEWORKS: dict[str, Framework] = {
    f.api.singular: f for f in (PyTorch(), TensorFlow(), XGBoost(), Paddle(), Jax())
}


def by_name(name: str) -> Framework:
    """A framework by any name of its kind, case-insensitively (``pytorchjob``, ``TFJob``, ``ptj``...)."""
    return FRAMEWORKS[kinds.v1_kind(name).singular]
