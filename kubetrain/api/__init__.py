"""Resource models of the training APIs, and the CRDs generated from them.

``v1`` holds the Kubeflow v1 job kinds, ``v2`` the Trainer v2 TrainJob and its
runtimes; ``crdgen`` turns them into ``deploy/crds``.
"""
