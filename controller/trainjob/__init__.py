"""TrainJob (trainer.kubeflow.org/v1alpha1): the pure ``decisions`` of a pass, JobSet's and the Job
controller's semantics (``jobset``, ``indexedjob``), and the ``reconciler`` that observes and writes.
The resolution of a TrainJob against its runtime is the library ``kubetrain.trainjob``."""
