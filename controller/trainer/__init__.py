"""TrainJobs (Kubeflow Trainer v2): a TrainJob worked out against its runtime into pod sets.

``state`` holds the build state, ``build`` resolves a TrainJob and its runtime
into it, ``policies`` holds the ML policies that wire the ranks together.
"""
