"""The Kubernetes runtime: one API client adapter, informers, leader election, and the
controller machinery that knows nothing about training jobs (work queue, expectations,
reconcile runner, aggregated Events).

The controller and the dev cluster's process node run on it. Nothing above this package
and the job client imports ``kubernetes_asyncio``, and nothing here imports a metrics
library: what the runtime measures goes to an ``observer.Observer``.
"""
