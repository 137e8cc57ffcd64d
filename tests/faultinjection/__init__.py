"""API faults on purpose, for tests: ``faultproxy`` (an HTTPS proxy in front of a kube-apiserver that
fails chosen requests) and ``faultrules`` (which requests, and how).

Test support, not part of the distribution: nothing kubetrain ships uses it, and a proxy built to
fail requests has no place in a user's install. From a checkout, ``python -m
tests.faultinjection.faultproxy`` runs it in front of any cluster (docs/dev-cluster.md).
"""
