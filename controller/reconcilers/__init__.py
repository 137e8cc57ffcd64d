"""Reconcilers: one per API (v1 jobs; TrainJob)."""
