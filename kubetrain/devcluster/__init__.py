"""The local development cluster: a real Kubernetes control plane without Docker.

etcd, kube-apiserver, kube-scheduler and kube-controller-manager are built from
Go modules (``build``) and run as plain processes (``cluster``), with kwok
driving simulated GPU nodes from stages of our own (``stages/``). Nothing here
is used by the controller or the operators at run time; it exists so the whole
system can be developed and tested on one machine.
"""
