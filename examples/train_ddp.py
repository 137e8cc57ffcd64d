"""Distributed data-parallel training of a small classifier, with checkpoint-aware resume.

Runs under a PyTorchJob (MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK from the
controller), under torchrun (a TrainJob), or alone. Uses gloo on CPUs and NCCL
when GPUs are visible. The data set is scikit-learn's handwritten digits, which
ships inside the package: nothing is downloaded.

Checkpoints go to ``$KUBETRAIN_CHECKPOINT_DIR`` every ``--checkpoint-every``
steps (rank 0 writes); on start the script resumes from the newer of
``$KUBETRAIN_RESUME_FROM`` and the latest checkpoint there, so a restarted or
resubmitted job repeats at most one checkpoint interval. Rank 0 leaves a
report (last checkpoint, step, final accuracy) as its termination message,
which the controller copies into the job.

An attempt that a newer attempt of the same job has fenced off (it kept
running on a node the cluster lost touch with) stops at its next write into
the checkpoint directory: every rank exits with code 86
(``kubetrain.checkpoint.EXIT_FENCED``) and rank 0 reports status ``fenced``.

A pod asked to stop (SIGTERM: an eviction, a preemption, a node drain) does not
lose the steps since the last checkpoint: every rank stops at the end of the
same step (they agree on it each step) and rank 0 saves that step first, so the
recreated pods resume where training was stopped.

Every step reports its progress and loss (``kubetrain.progress``): the job shows
PROGRESS and ETA in ``kubectl get`` while it trains.

    python examples/train_ddp.py --steps 200 --checkpoint-every 20
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from kubetrain.checkpoint import EXIT_FENCED, CheckpointManager, FencedOff
from kubetrain.locations import is_url
from kubetrain.progress import report_progress

T = TypeVar("T")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints")
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="extra time per step (to watch it run)"
    )
    parser.add_argument(
        "--fail-at-step", type=int, default=None, help="exit 1 at this step (fault injection)"
    )
    parser.add_argument(
        "--fail-on-attempt",
        type=int,
        default=1,
        help="inject --fail-at-step only on this attempt ($KUBETRAIN_ATTEMPT)",
    )
    return parser.parse_args()


def log(rank: int, message: str, **fields: Any) -> None:
    extra = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"[rank {rank}] {message} {extra}".rstrip(), flush=True)


def setup() -> tuple[int, int, torch.device]:
    """Join the process group when there is one; pick the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    use_cuda = torch.cuda.is_available() and bool(os.environ.get("CUDA_VISIBLE_DEVICES", "x"))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world)
        rank = dist.get_rank()
    torch.set_num_threads(1)
    return rank, world, device


def data(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    shard = slice(rank, None, world)  # every rank trains on its own slice
    return (
        torch.from_numpy(x_train[shard]),
        torch.from_numpy(y_train[shard]),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
    )


def model() -> nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def unless_fenced(rank: int, world: int, device: torch.device, use: Callable[[], T]) -> T:
    """Run ``use`` (a read or write of the checkpoint dir) on every rank; stop them all if rank 0 is fenced off.

    Only rank 0 checks the fence. Without this, the other ranks would die at their next
    collective with a connection error, hiding why the attempt ended.
    """
    fenced: FencedOff | None = None
    try:
        result = use()
    except FencedOff as error:
        fenced = error
    if world > 1:
        flag = torch.tensor([0 if fenced is None else 1], device=device)
        dist.broadcast(flag, src=0)
        if int(flag.item()) and fenced is None:
            log(rank, "stopping: rank 0 was fenced off by a newer attempt of this job")
            raise SystemExit(EXIT_FENCED)
    if fenced is not None:
        raise fenced
    return result


def resume_step(ckpt: CheckpointManager | None, rank: int, world: int, device: torch.device) -> int:
    """The step rank 0 resumes from (0 for a fresh start), agreed by every rank."""
    step = 0
    if ckpt is not None:
        point = unless_fenced(rank, world, device, ckpt.resume_point)
        step = point.step if point is not None else 0
    if world > 1:
        tensor = torch.tensor([step], device=device)
        dist.broadcast(tensor, src=0)
        step = int(tensor.item())
    return step


def append_metrics(ckpt: CheckpointManager, path: Path | None, record: dict[str, Any]) -> None:
    """Rank 0 appends a line to the metrics file next to the checkpoints (unless fenced off)."""
    if path is None:
        return
    ckpt.check_fence()
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def load(ckpt: CheckpointManager, step: int, net: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load the checkpoint of ``step`` (from the directory, or the one the controller pointed at)."""
    checkpoint = next((c for c in [*ckpt.checkpoints(), ckpt.resume_point()] if c and c.step == step), None)
    if checkpoint is None:
        raise SystemExit(
            f"checkpoint of step {step} is in neither {ckpt.directory} nor $KUBETRAIN_RESUME_FROM"
        )
    state = ckpt.load(checkpoint)
    net.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    ckpt.resumed_from = checkpoint
    ckpt.last_saved = checkpoint
    ckpt.last_step = step


def checkpoints(directory: str | None, keep: int) -> CheckpointManager | None:
    """The checkpoints in ``directory`` (None without one), with a report written however the process exits."""
    if not directory:
        return None
    ckpt = CheckpointManager(directory, keep=keep)
    ckpt.install_report_on_exit()
    return ckpt


def restore(
    ckpt: CheckpointManager | None,
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    rank: int,
    world: int,
    device: torch.device,
) -> int:
    """Load the checkpoint every rank resumes from, if any; the step training goes on after."""
    start = resume_step(ckpt, rank, world, device)
    if start and ckpt is not None:
        load(ckpt, start, net, optimizer)
        log(
            rank,
            "resumed from checkpoint",
            step=start,
            path=ckpt.resumed_from.path if ckpt.resumed_from else "-",
        )
    else:
        log(rank, "starting from scratch", world_size=world, device=device)
    return start


def save(
    ckpt: CheckpointManager,
    state: dict[str, Any],
    step: int,
    *,
    loss: float,
    rank: int,
    world: int,
    device: torch.device,
) -> None:
    """Save ``state`` as the checkpoint of ``step`` (rank 0 writes; every rank stops if it is fenced off)."""
    saved = unless_fenced(
        rank, world, device, partial(ckpt.save, state, step, metrics={"loss": round(loss, 5)})
    )
    if saved is not None:
        log(rank, "checkpoint saved", step=step, path=saved.path)


def bookkeeper(
    ckpt: CheckpointManager | None,
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    args: argparse.Namespace,
    *,
    attempt: int,
    rank: int,
    world: int,
    device: torch.device,
) -> Callable[[int, float], None] | None:
    """What to do after each step (``after_step``), ready to call; None without checkpoints."""
    if ckpt is None:
        return None
    # Beside the checkpoints when they are on a volume; an object store keeps checkpoints only.
    on_volume = not is_url(ckpt.location)
    metrics_file = ckpt.directory / "metrics.jsonl" if rank == 0 and on_volume else None
    if metrics_file is not None:
        metrics_file.parent.mkdir(parents=True, exist_ok=True)

    def state() -> dict[str, Any]:
        return {"model": net.state_dict(), "optimizer": optimizer.state_dict()}

    ckpt.save_on_termination(state)  # a disrupted pod saves the step it stopped at
    return partial(
        after_step,
        ckpt,
        state=state,
        args=args,
        attempt=attempt,
        metrics_file=metrics_file,
        rank=rank,
        world=world,
        device=device,
    )


def after_step(
    ckpt: CheckpointManager,
    step: int,
    loss_value: float,
    *,
    state: Callable[[], dict[str, Any]],
    args: argparse.Namespace,
    attempt: int,
    metrics_file: Path | None,
    rank: int,
    world: int,
    device: torch.device,
) -> None:
    """The metrics line, the periodic checkpoint, and a stop (with a last save) when asked to end."""
    if step % 10 == 0 or step == args.steps:
        record = {"step": step, "loss": loss_value, "attempt": attempt}
        unless_fenced(rank, world, device, partial(append_metrics, ckpt, metrics_file, record))
    if step % args.checkpoint_every == 0 or step == args.steps:
        save(ckpt, state(), step, loss=loss_value, rank=rank, world=world, device=device)
    ckpt.end_of_step(step, stop=stop_requested(ckpt, world, device))


def stop_requested(ckpt: CheckpointManager, world: int, device: torch.device) -> bool:
    """Whether any rank was asked to terminate (its pod evicted, preempted, drained): all stop together."""
    if world == 1:
        return ckpt.termination_requested
    flag = torch.tensor([1 if ckpt.termination_requested else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def finish(ckpt: CheckpointManager | None, world: int, metrics: dict[str, float]) -> None:
    """Report the final metrics, then wait for every rank to be done before any leaves."""
    if ckpt is not None:
        ckpt.write_report(metrics=metrics)
    if world > 1:
        dist.barrier()


def leave_process_group() -> None:
    """Destroy the process group, however training ended (done, fenced off, stopped, failed).

    Left to the interpreter's exit, gloo's worker threads may still hold finished collectives whose
    tensors then need the GIL of an interpreter being torn down: the process aborts (SIGABRT) instead
    of exiting with its code, e.g. a fenced-off rank with -6 rather than 86. That is not all torch
    leaves to the teardown, so the script also ends without one (``leave``).
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def evaluate(net: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    with torch.no_grad():
        predictions = net(x.to(device)).argmax(dim=1).cpu()
    return float((predictions == y).float().mean())


def main() -> int:
    args = parse_args()
    rank, world, device = setup()
    try:
        return train(args, rank, world, device)
    finally:
        leave_process_group()


def train(args: argparse.Namespace, rank: int, world: int, device: torch.device) -> int:
    """Train from the agreed resume point to ``args.steps``; the exit code."""
    directory = os.environ.get("KUBETRAIN_CHECKPOINT_DIR")
    ckpt = checkpoints(directory, args.keep)
    x_train, y_train, x_test, y_test = data(rank, world)
    net = model().to(device)
    if world > 1:
        net = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    start = restore(ckpt, net.module if world > 1 else net, optimizer, rank=rank, world=world, device=device)

    attempt = int(os.environ.get("KUBETRAIN_ATTEMPT", "1") or 1)
    inner = net.module if world > 1 else net
    keep = bookkeeper(ckpt, inner, optimizer, args, attempt=attempt, rank=rank, world=world, device=device)
    generator = torch.Generator().manual_seed(1000 + rank)
    loss_value = float("nan")
    for step in range(start + 1, args.steps + 1):
        if args.fail_at_step is not None and step == args.fail_at_step and attempt == args.fail_on_attempt:
            log(rank, "injected failure", step=step, attempt=attempt)
            if ckpt is not None:
                ckpt.write_report(status="failed")
            return 1
        batch = torch.randint(0, len(x_train), (args.batch_size,), generator=generator)
        optimizer.zero_grad()
        loss = loss_fn(net(x_train[batch].to(device)), y_train[batch].to(device))
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if args.step_seconds:
            time.sleep(args.step_seconds)
        report_progress(step, total=args.steps, metrics={"loss": loss_value})  # live on the job (rank 0)
        if step % 10 == 0 or step == args.steps:
            log(rank, "training", step=step, loss=f"{loss_value:.4f}")
        if keep is not None:
            keep(step, loss_value)

    accuracy = evaluate(inner, x_test, y_test, device)
    log(rank, "done", step=args.steps, accuracy=f"{accuracy:.4f}", loss=f"{loss_value:.4f}")
    finish(ckpt, world, metrics={"accuracy": round(accuracy, 4), "loss": round(loss_value, 5)})
    return 0


def exit_code(stop: SystemExit) -> int:
    """The code ``sys.exit`` would leave with (a message goes to stderr, as the interpreter prints it)."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def leave(code: int) -> NoReturn:
    """Exit with ``code`` without tearing the interpreter down.

    The exit handlers run (the checkpoint report, logging), then the process ends at once: objects
    torch leaves to the interpreter's teardown (the store's and gloo's threads, even after the process
    group is destroyed) can abort it there, so a rank fenced off with 86 would end with -6 (SIGABRT).
    """
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as stop:
        code = exit_code(stop)
    except BaseException:  # what the interpreter would print (and the checkpoint report records)
        sys.excepthook(*sys.exc_info())
        code = 1
    leave(code)
