"""A tiny Lightning run on CPU for ``tests/unit/test_integrations_lightning.py``:
``python -m tests.unit.lightning_worker DIRPATH MAX_STEPS [--sigterm-at N]``.

A one-layer regression saving every 2 steps into DIRPATH (``ModelCheckpoint`` with ``last.ckpt``) with
``KubetrainCallback``, resumed from ``resume_point(DIRPATH)``. Each optimizer step it trains is appended
to ``DIRPATH/steps.txt``; ``--sigterm-at N`` sends the process SIGTERM at step N (a preemption).
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from kubetrain.integrations.lightning import KubetrainCallback, resume_point

SAVE_EVERY = 2


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)


class Steps(pl.Callback):
    def __init__(self, record: Path, sigterm_at: int | None) -> None:
        self.record, self.sigterm_at = record, sigterm_at

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        with self.record.open("a") as out:
            out.write(f"{trainer.global_step}\n")
        if trainer.global_step == self.sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dirpath")
    parser.add_argument("max_steps", type=int)
    parser.add_argument("--sigterm-at", type=int)
    options = parser.parse_args()
    Path(options.dirpath).mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    checkpoints = ModelCheckpoint(
        dirpath=options.dirpath, every_n_train_steps=SAVE_EVERY, save_top_k=-1, save_last=True
    )
    trainer = pl.Trainer(
        max_steps=options.max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            checkpoints,
            KubetrainCallback(),
            Steps(Path(options.dirpath) / "steps.txt", options.sigterm_at),
        ],
    )
    trainer.fit(Regression(), train_dataloaders=data(), ckpt_path=resume_point(options.dirpath))


if __name__ == "__main__":
    main()
