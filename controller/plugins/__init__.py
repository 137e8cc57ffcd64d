"""Pod plugins: what is done to every pod of every kind, one plugin each (``state.PodPlugin``).

``checkpoint`` injects the checkpoint env and volume, ``gpu`` tolerates GPU
nodes, ``gang`` points pods at their pod group (one class per gang scheduler),
``master_wait`` adds upstream's PyTorch master-wait init container when asked.
"""
