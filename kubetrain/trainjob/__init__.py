"""TrainJobs (Kubeflow Trainer v2): a TrainJob worked out against its runtime into pod sets, without I/O.

``state`` holds the build state, ``build`` resolves a TrainJob and its runtime into it, ``policies``
holds the ML policies that wire the ranks together, ``outputs`` says where the outputs lie and whether
deleting the job deletes them. A library, not part of the controller: the controller builds pods from
it, and the Airflow operators and the CLI check a TrainJob against its runtime with the same code
before they submit it.
"""
