"""Resume and reports for the Hugging Face ``Trainer``: a callback, and the checkpoint to resume from.

Two lines in the training script, the checkpoints staying the Trainer's own ``checkpoint-<N>/``::

    from kubetrain.integrations.hf import KubetrainCallback, resume_point

    args = TrainingArguments(output_dir=os.environ["KUBETRAIN_CHECKPOINT_DIR"], save_steps=100, ...)
    trainer = Trainer(model, args, ..., callbacks=[KubetrainCallback()])
    trainer.train(resume_from_checkpoint=resume_point(args.output_dir))

``resume_point`` is the newest complete ``checkpoint-<N>`` (``kubetrain.layouts``), or None on a first run.
The callback reports progress and the logged metrics (``kubetrain.progress``), takes each save as the last
checkpoint and writes the termination report at the end (``kubetrain.checkpoint``), so the controller
learns where to resume from as it does for ``CheckpointManager``.

SIGTERM (a preemption, an eviction, a drain): with ``TrainingArguments(enable_jit_checkpoint=True)``
(transformers 5) the Trainer's own "JIT" checkpoint saves the step it is at; otherwise the callback asks
the Trainer to save at the end of the current step, giving up after ``termination_wait`` seconds. Either
way training stops there, the report says ``preempted`` and ``trainer.train`` raises ``SystemExit(143)``,
the exit code of a disruption, so the job's restart policy retries it rather than calling it done.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from kubetrain import layouts
from kubetrain.checkpoint import EXIT_TERMINATED, CheckpointManager
from kubetrain.integrations import reports
from kubetrain.locations import is_url
from kubetrain.progress import report_progress

if TYPE_CHECKING:
    from transformers import TrainerCallback
else:
    try:
        from transformers import TrainerCallback
    except (
        ImportError
    ):  # the hf extra is missing: the module still imports, the callback says what to install
        TrainerCallback = object

CHECKPOINT_PREFIX = "checkpoint"  # the Trainer's PREFIX_CHECKPOINT_DIR


def resume_point(output_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The newest complete ``checkpoint-<N>`` in ``output_dir`` (default ``$KUBETRAIN_CHECKPOINT_DIR``), for
    ``trainer.train(resume_from_checkpoint=...)``; None when there is none (training starts over)."""
    location = reports.checkpoint_location(output_dir)
    if is_url(location):
        raise ValueError(f"the Trainer saves to and resumes from a local directory, not {location}")
    return reports.resume_location(location, layouts.HF)


class KubetrainCallback(TrainerCallback):
    """Reports the Trainer's progress, metrics and checkpoints to kubetrain; stops at a step on SIGTERM."""

    def __init__(self, *, termination_wait: float = 20.0) -> None:
        if TrainerCallback is object:
            raise ImportError("KubetrainCallback needs transformers: pip install 'kubetrain[hf]'")
        self.termination_wait = termination_wait  # without the JIT checkpoint: how long a step may take
        self.manager: CheckpointManager | None = None
        self._jit = False

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Made with the Trainer, after its JIT checkpoint (if enabled) took SIGTERM."""
        if not state.is_world_process_zero or self.manager is not None:
            return
        location = reports.checkpoint_location(args.output_dir)
        self._jit = bool(getattr(args, "enable_jit_checkpoint", False))
        if self._jit:
            self.manager = reports.report_manager(location)
            _note_sigterm(self.manager)
        else:
            # SIGTERM sets termination_requested (and exits after the wait); on_step_end has the Trainer
            # save, so the state callable is never asked for.
            self.manager = CheckpointManager(location)
            self.manager.save_on_termination(lambda: None, wait=self.termination_wait)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.manager is not None and state.global_step > 0:
            path = os.path.join(args.output_dir, f"{CHECKPOINT_PREFIX}-{state.global_step}")
            reports.record_resumed(self.manager, path, state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.manager is None:
            return
        reports.record_progress(self.manager, state.global_step)
        report_progress(state.global_step, total=state.max_steps or None)
        if self.manager.termination_requested and not self._jit:
            control.should_save = True
            control.should_training_stop = True

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if self.manager is None:
            return
        metrics = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float | str)}
        reports.record_progress(self.manager, state.global_step, metrics)
        report_progress(state.global_step, total=state.max_steps or None, metrics=metrics)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.manager is None:
            return
        path = os.path.join(args.output_dir, f"{CHECKPOINT_PREFIX}-{state.global_step}")
        reports.record_saved(self.manager, path, state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.manager is None:
            return
        # The JIT checkpoint saves without an on_save: the directory says what it left.
        found = layouts.detect(self.manager.location).newest(layouts.HF)
        last = self.manager.last_saved
        if found is not None and found.step is not None and (last is None or found.step > last.step):
            reports.record_saved(self.manager, found.location, found.step)
        if not self.manager.termination_requested:
            self.manager.write_report(status="completed")
            return
        self.manager.write_report(status="preempted")
        print(f"kubetrain: stopped at step {state.global_step} for termination", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_TERMINATED)


def _note_sigterm(manager: CheckpointManager) -> None:
    """Chain a handler in front of the Trainer's JIT one that marks the manager's termination request."""
    jit_handler = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        manager.termination_requested = True
        if callable(jit_handler):
            jit_handler(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
