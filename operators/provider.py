"""Provider metadata, found by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

import kubetrain


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "kubetrain",
        "name": "kubetrain",
        "description": "Run and track Kubeflow training jobs (PyTorchJob, TrainJob and the other v1 kinds) with "
        "checkpoint-aware resume.",
        "versions": [kubetrain.__version__],
        "integrations": [
            {
                "integration-name": "Kubeflow training (kubetrain)",
                "external-doc-url": "https://github.com/kubeflow/trainer",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Kubeflow training (kubetrain)",
                "python-modules": ["kubetrain.operators.operators"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Kubeflow training (kubetrain)",
                "python-modules": ["kubetrain.operators.sensors"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Kubeflow training (kubetrain)",
                "python-modules": ["kubetrain.operators.triggers"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Kubeflow training (kubetrain)",
                "python-modules": ["kubetrain.operators.hooks"],
            }
        ],
        "extra-links": ["kubetrain.operators.links.TrainingJobLink"],
    }
