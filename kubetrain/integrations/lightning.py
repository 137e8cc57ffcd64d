"""Resume and reports for Lightning (``lightning.pytorch``): a callback, and the ``ckpt_path`` to resume from.

Two lines in the training script, the checkpoints staying Lightning's own ``*.ckpt``::

    from kubetrain.integrations.lightning import KubetrainCallback, resume_point

    directory = os.environ["KUBETRAIN_CHECKPOINT_DIR"]
    checkpoints = ModelCheckpoint(dirpath=directory, every_n_train_steps=100, save_last=True)
    trainer = Trainer(callbacks=[checkpoints, KubetrainCallback()], ...)
    trainer.fit(model, ckpt_path=resume_point(directory))

``resume_point`` is the ``.ckpt`` with the highest ``global_step`` in the directory (``kubetrain.layouts``,
which reads the step without loading the file), or None on a first run. The callback reports progress
and the logged metrics (``kubetrain.progress``), takes each checkpoint Lightning wrote as the last one and
writes the termination report at the end (``kubetrain.checkpoint``).

SIGTERM (a preemption, an eviction, a drain) is Lightning's: it stops at the end of the batch with a
``SIGTERMException``. The callback then saves ``preempted-step=<N>.ckpt`` there, reports ``preempted``
and makes the exception's exit code 143 (Lightning's is 0, which would end the job as done), so the
job's restart policy retries it and the retry resumes from that step.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kubetrain import layouts
from kubetrain.checkpoint import EXIT_TERMINATED, CheckpointManager
from kubetrain.integrations import reports
from kubetrain.progress import report_progress

if TYPE_CHECKING:
    from lightning.pytorch import Callback
else:
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the lightning extra is missing: the module still imports
        Callback = object

PREEMPTED_NAME = "preempted-step={step}.ckpt"


def resume_point(dirpath: str | os.PathLike[str] | None = None) -> str | None:
    """The newest complete ``.ckpt`` in ``dirpath`` (default ``$KUBETRAIN_CHECKPOINT_DIR``; a path or an
    fsspec URL), for ``trainer.fit(model, ckpt_path=...)``; None when there is none."""
    return reports.resume_location(dirpath, layouts.LIGHTNING)


class KubetrainCallback(Callback):
    """Reports Lightning's progress, metrics and checkpoints to kubetrain; saves the step it stops at on
    SIGTERM. ``dirpath``: where the checkpoints go, by default the ``ModelCheckpoint``'s."""

    def __init__(self, dirpath: str | os.PathLike[str] | None = None) -> None:
        if Callback is object:
            raise ImportError("KubetrainCallback needs lightning: pip install 'kubetrain[lightning]'")
        super().__init__()
        self.dirpath = dirpath
        self.manager: CheckpointManager | None = None
        self._saved_since_look = False

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """After every callback's setup: the ``ModelCheckpoint`` knows its directory by now."""
        if not trainer.is_global_zero or self.manager is not None:
            return
        default = getattr(trainer.checkpoint_callback, "dirpath", None)
        self.manager = reports.report_manager(
            reports.checkpoint_location(self.dirpath if self.dirpath is not None else default)
        )

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.manager is not None and trainer.ckpt_path:
            reports.record_resumed(self.manager, str(trainer.ckpt_path), trainer.global_step)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._saved_since_look = True  # the file is written after this hook: looked for at the next one

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.manager is None:
            return
        self._look_for_saves()
        step = trainer.global_step
        metrics = _numbers(trainer.callback_metrics) if step % max(1, trainer.log_every_n_steps) == 0 else {}
        reports.record_progress(self.manager, step, metrics)
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        report_progress(step, total=total, metrics=metrics)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._look_for_saves()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._look_for_saves()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.manager is None:
            return
        self._look_for_saves(always=True)
        reports.record_progress(self.manager, trainer.global_step, _numbers(trainer.callback_metrics))
        self.manager.write_report(status="completed")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if not isinstance(exception, SIGTERMException):
            self._look_for_saves()  # the report is written at exit, with the error
            return
        location = self.manager.location if self.manager is not None else None
        path = None
        if location is not None:
            path = f"{location.rstrip('/')}/{PREEMPTED_NAME.format(step=trainer.global_step)}"
        path = trainer.strategy.broadcast(path)  # saving is collective: every rank saves the same file
        if path is not None:
            trainer.save_checkpoint(path)
        if self.manager is not None and path is not None:
            reports.record_saved(self.manager, path, trainer.global_step)
            reports.record_progress(self.manager, trainer.global_step, _numbers(trainer.callback_metrics))
            self.manager.write_report(status="preempted")
        exception.code = EXIT_TERMINATED  # Lightning's is None (exit 0): the job would count as done

    def _look_for_saves(self, *, always: bool = False) -> None:
        """Take the newest checkpoint Lightning wrote since the last look as the last one saved."""
        if self.manager is None or not (always or self._saved_since_look):
            return
        self._saved_since_look = False
        found = layouts.detect(self.manager.location).newest(layouts.LIGHTNING)
        if found is not None:
            reports.record_saved(self.manager, found.location, found.step)


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    """Logged metrics as plain numbers (they are 0-d tensors)."""
    numbers = {}
    for name, value in metrics.items():
        item = getattr(value, "item", None)
        numbers[name] = item() if callable(item) else value
    return numbers
