"""The kubetrain controller (imported as ``kubetrain.controller``).

Reconciles Kubeflow training jobs into pods and headless services; see
docs/architecture.md.
"""
