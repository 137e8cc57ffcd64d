"""The Kubeflow v1 kinds (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob): one ``Framework`` each
(``frameworks``), the pure ``decisions`` of a pass and the ``reconciler`` that carries them out."""
