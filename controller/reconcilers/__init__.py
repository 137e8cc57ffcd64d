"""Reconcilers: one per API (v1 jobs; TrainJob) on one skeleton, each a pure decision and its writes."""
