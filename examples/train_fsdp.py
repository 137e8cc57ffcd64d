"""FSDP2 training on CPUs (gloo) with sharded, asynchronous checkpoints and checkpoint-aware resume.

Runs under a PyTorchJob (MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK from the controller) or under
torchrun (a TrainJob), with two ranks or more. The model is tiny and the data synthetic: the point
is the checkpoints, not the model.

Every ``--checkpoint-every`` steps every rank calls
``CheckpointManager.save(state, step, sharded=True, blocking=False)``: each rank's shards are copied
into host memory before ``save`` returns; the upload (``torch.distributed.checkpoint``) and rank 0's
commit run in the background while training goes on. The report (rank 0's termination message)
names a step only once it is committed.

On start every rank loads the checkpoint rank 0 chose (the newer of ``$KUBETRAIN_RESUME_FROM`` and
the location's latest), resharded to this job's world size: a job resubmitted with fewer or more
workers continues from the same step. Every rank logs a SHA-256 of the whole model and optimizer
state when it saves a step and when it resumes from one, so the two can be compared.

``--die-after-staging=STEP`` (fault injection) makes rank ``--die-rank`` end its process with
``os._exit(17)`` right after ``save`` of STEP returned, while its shards are being uploaded, in a run
that started from scratch (not in a retry, which resumes): no commit is made for STEP, and the retry
(a restart in place, ``kubetrain resume``, a resubmission) resumes from the step before.

    torchrun --nproc-per-node=2 examples/train_fsdp.py --steps 40 --checkpoint-every 10
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import os
import sys
import time
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from kubetrain.checkpoint import CheckpointManager

EXIT_INJECTED = 17  # the exit code of --die-after-staging


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps in all")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    parser.add_argument("--timeout", type=float, default=60, help="seconds a collective may wait for a rank")
    parser.add_argument("--die-after-staging", type=int, default=None, help="fault injection: see above")
    parser.add_argument("--die-rank", type=int, default=1, help="the rank --die-after-staging ends")
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="extra time per step (to watch it run)"
    )
    return parser.parse_args()


def log(rank: int, message: str, **fields: Any) -> None:
    extra = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"[rank {rank}] {message} {extra}".rstrip(), flush=True)


def model(mesh: Any) -> nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    for layer in net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(8, 16, generator=generator)
    return x, x[:, :4].sin()


def state(net: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    """The sharded state to save or load into: every rank's own shards (DTensors)."""
    model_state, optim_state = get_state_dict(net, optimizer)
    return {"model": model_state, "optimizer": optim_state, "step": step}


def digest(net: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """SHA-256 of the whole model and optimizer state, the same on every rank and in any world size
    (gathered onto every rank: call it on every rank)."""
    model_state, optim_state = get_state_dict(net, optimizer, options=StateDictOptions(full_state_dict=True))
    sha = hashlib.sha256()

    def feed(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                feed(f"{prefix}/{key}", value[key])
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                feed(f"{prefix}/{index}", item)
        elif isinstance(value, torch.Tensor):
            sha.update(prefix.encode())
            sha.update(value.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
        else:
            sha.update(f"{prefix}={value!r}".encode())

    feed("model", model_state)
    feed("optimizer", optim_state)
    return sha.hexdigest()[:16]


def train(args: argparse.Namespace, ckpt: CheckpointManager, rank: int, world: int) -> int:
    mesh = init_device_mesh("cpu", (world,))
    net = model(mesh)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    attempt = int(os.environ.get("KUBETRAIN_ATTEMPT", "1") or 1)

    start = 0
    loading = state(net, optimizer, 0)
    resumed = ckpt.load_latest(state_dict=loading)  # every rank: rank 0's choice, resharded to this world
    if resumed is not None:
        set_state_dict(
            net, optimizer, model_state_dict=loading["model"], optim_state_dict=loading["optimizer"]
        )
        start = resumed[1]
        log(rank, "resumed from checkpoint", step=start, world_size=world, state=digest(net, optimizer))
    else:
        log(rank, "starting from scratch", world_size=world, attempt=attempt)

    loss_value = float("nan")
    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if step % 10 == 0 or step == args.steps:
            log(rank, "training", step=step, loss=f"{loss_value:.5f}")
        if step % args.checkpoint_every == 0 or step == args.steps:
            saved_digest = digest(net, optimizer)
            ckpt.save(
                state(net, optimizer, step), step, sharded=True, blocking=False, metrics={"loss": loss_value}
            )
            log(rank, "checkpoint staged", step=step, state=saved_digest)
            if step == args.die_after_staging and rank == args.die_rank and resumed is None:
                log(rank, "injected failure: exiting while the checkpoint is uploaded", step=step)
                os._exit(EXIT_INJECTED)

    committed = ckpt.wait()  # the last save, committed (every rank: its collectives)
    if committed is not None:
        log(rank, "checkpoint committed", step=committed.step, location=committed.location)
    ckpt.write_report(metrics={"loss": round(loss_value, 6)})
    log(rank, "done", step=args.steps, loss=f"{loss_value:.5f}")
    dist.barrier()
    return 0


def main() -> int:
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout))
    ckpt = CheckpointManager(keep=args.keep)  # $KUBETRAIN_CHECKPOINT_DIR: a directory or an s3:// URL
    ckpt.install_report_on_exit()
    try:
        return train(args, ckpt, dist.get_rank(), world)
    finally:
        settle(ckpt, rank)
        dist.destroy_process_group()


def settle(ckpt: CheckpointManager, rank: int) -> None:
    """Let a save still in flight end before the process groups its collectives use are destroyed.

    Only after an error (train() waits for its last save): the save then fails too, at once when a
    rank is gone. The error that ended training is the one raised and reported; this one is printed.
    """
    try:
        ckpt.wait()
    except BaseException as error:
        log(rank, "the checkpoint in flight failed too:", error=f"{type(error).__name__}: {error}")


def leave(code: int) -> NoReturn:
    """Run the exit handlers (the checkpoint report), then end the process at once: torch leaves
    threads (gloo's, the rendezvous store's) to the interpreter's teardown, which can abort it and
    hide the exit code (see examples/train_ddp.py)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as stop:  # FencedOff (86) among them
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # what the interpreter would print (and the checkpoint report records)
        sys.excepthook(*sys.exc_info())
        code = 1
    leave(code)
