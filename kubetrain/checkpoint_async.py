"""Asynchronous saves: the training loop waits only while the state is copied into host memory; the
write and the commit run in a background thread.

Why: writing a checkpoint (to a volume, more so to an object store) takes seconds to minutes that the
GPUs would spend idle. ``save(state, step, blocking=False)`` serialises the state into bytes in the
caller's thread (``torch.save`` into memory copies every tensor off the device, so the training loop
may change the model as soon as ``save`` returns) and hands the bytes to a ``BackgroundSave``, which
writes and commits them exactly as a blocking save would, fence checks included: a stale attempt's
background commit is refused as a foreground one is.

The rules that keep it safe:

- at most one save in flight: the next ``save`` (blocking or not) first waits for the previous one
  to commit, so saves commit in order and host memory holds at most one staged copy;
- ``last_saved``, and so the report's ``last_checkpoint``, names a checkpoint only once it is
  committed;
- what a background save raised is raised in the training thread by the next ``save``, by ``wait()``,
  or at exit (printed, and put in the report as the error), never lost;
- termination (``end_of_step`` after ``save_on_termination``, and SIGTERM without it) waits for the
  save in flight before it saves or reports.

A sharded save (``kubetrain.checkpoint_sharded``) goes to the background the same way, except that
DCP's ``async_save`` does the staging (each rank copies its shards into host memory) and the
background's collectives use a gloo process group of their own, apart from the training loop's.

The thread is not a daemon: a script that ends without ``wait()`` still finishes its last save before
the interpreter exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubetrain.checkpoint import Checkpoint


class BackgroundSave:
    """One save running in its own thread; what it made or raised is kept for whoever waits on it."""

    def __init__(self, step: int, work: Callable[[], Checkpoint | None]) -> None:
        self.step = step
        self._work = work
        self._checkpoint: Checkpoint | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"kubetrain-checkpoint-step-{step}")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._checkpoint = self._work()
        except BaseException as error:  # FencedOff is a SystemExit: it too goes to the training thread
            self._error = error

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Checkpoint | None:
        """The committed checkpoint (None on a rank that does not write); raises what the save raised,
        or ``TimeoutError`` when it is still running after ``timeout`` seconds."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the checkpoint of step {self.step} is still being written")
        if self._error is not None:
            raise self._error
        return self._checkpoint
