"""kubetrain: distributed training on Kubernetes, driven from workflow engines.

The import root holds the shared core (resource models, names, the client, the
checkpoint helper and the local development cluster). The controller, the
Airflow provider and the KFP components live in the top-level folders
``controller/``, ``operators/`` and ``components/`` of the repository and are
imported as ``kubetrain.controller``, ``kubetrain.operators`` and
``kubetrain.components`` (see docs/architecture.md for how).
"""

__version__ = "0.1.0"
