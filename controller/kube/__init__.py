"""The Kubernetes side of the controller: one client adapter, informers, leader election.

Nothing above this package imports ``kubernetes_asyncio``; swapping the client
library means rewriting these modules only.
"""
