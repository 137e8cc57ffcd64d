"""Checkpoint-aware resume for the trainers people already run: ``kubetrain.integrations.hf`` (Hugging
Face ``Trainer``) and ``kubetrain.integrations.lightning`` (Lightning), each a callback and a resume point.

The trainer keeps writing its own checkpoints; the callback reports progress and the trainer's last
checkpoint the way ``kubetrain.checkpoint`` does (``docs/checkpoints.md``), and the resume point picks the
trainer's newest complete checkpoint (``kubetrain.layouts``). Importing this package imports no trainer:
each module needs its extra (``kubetrain[hf]``, ``kubetrain[lightning]``) only once it is used.
"""
