"""A tiny Hugging Face ``Trainer`` run on CPU for ``tests/unit/test_integrations_hf.py``:
``python -m tests.unit.hf_worker OUTPUT_DIR MAX_STEPS [--sigterm-at N] [--jit] [--crash-at N]``.

A two-layer GPT-2 built from its config (nothing downloaded), saving every 2 steps into OUTPUT_DIR
with ``KubetrainCallback``, resumed from ``resume_point(OUTPUT_DIR)``. Each optimizer step it trains
is appended to ``OUTPUT_DIR/steps.txt``, so the test can see that no step was trained twice.
``--sigterm-at N`` sends the process SIGTERM at step N (a preemption), ``--crash-at N`` raises there.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from kubetrain.integrations.hf import KubetrainCallback, resume_point

SAVE_EVERY = 2


def tiny_model() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    return GPT2LMHeadModel(config)


def dataset(samples: int = 64) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (samples, 16), generator=generator)
    return [{"input_ids": row, "labels": row} for row in ids]


class Steps(TrainerCallback):  # type: ignore[misc]
    """Writes each trained step down; at ``sigterm_at`` the pod is "preempted", at ``crash_at`` it fails."""

    def __init__(self, record: Path, sigterm_at: int | None, crash_at: int | None, slow: bool) -> None:
        self.record, self.sigterm_at, self.crash_at, self.slow = record, sigterm_at, crash_at, slow
        self.terminated = False

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        with self.record.open("a") as out:
            out.write(f"{state.global_step}\n")
        if state.global_step == self.crash_at:
            raise RuntimeError(f"crashed at step {state.global_step}")
        if state.global_step == self.sigterm_at:
            self.terminated = True
            os.kill(os.getpid(), signal.SIGTERM)
        if self.terminated and self.slow:
            time.sleep(1.0)  # the JIT checkpoint waits a few seconds before it asks for the save


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("max_steps", type=int)
    parser.add_argument("--sigterm-at", type=int)
    parser.add_argument("--crash-at", type=int)
    parser.add_argument("--jit", action="store_true")
    options = parser.parse_args()
    args = TrainingArguments(
        output_dir=options.output_dir,
        max_steps=options.max_steps,
        per_device_train_batch_size=4,
        save_strategy="steps",
        save_steps=SAVE_EVERY,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        enable_jit_checkpoint=options.jit,
    )
    record = Path(options.output_dir) / "steps.txt"
    steps = Steps(record, options.sigterm_at, options.crash_at, slow=options.jit)
    trainer = Trainer(tiny_model(), args, train_dataset=dataset(), callbacks=[KubetrainCallback(), steps])
    trainer.train(resume_from_checkpoint=resume_point(args.output_dir))


if __name__ == "__main__":
    main()
