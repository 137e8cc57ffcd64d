"""What every kind's reconciler shares: the pass skeleton and the executor of a decision (``skeleton``),
conditions, the writes of children and their refusals, the event handlers, stall and departed-pod
observation, and the restart and child bookkeeping both the v1 kinds and TrainJob's JobSet semantics use."""
