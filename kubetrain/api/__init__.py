"""The kinds kubetrain serves, their resource models, and the CRDs generated from them.

``kinds`` is the registry of the eight kinds (names, groups, replica types,
defaults): every other module reads a kind's facts from it. ``v1`` holds the
models of the Kubeflow v1 job kinds, ``v2`` those of the Trainer v2 TrainJob
and its runtimes; ``crdgen`` turns them into ``deploy/crds``.
"""
