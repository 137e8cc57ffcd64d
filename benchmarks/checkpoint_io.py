"""What a checkpoint costs a training loop: `kubetrain.checkpoint` against the raw write of the same bytes.

For each state size (CPU tensors, float32), each world size (ranks are processes on this machine,
a gloo process group, the state the same on every rank as in DDP) and each target (a directory on
the local disk, and the dev cluster's S3 server), it measures, with ``CheckpointManager`` called as a
training script calls it:

* ``save(state, step)``: rank 0 writes; the loop is blocked until the checkpoint is committed;
* ``save(state, step, blocking=False)`` then ``wait()``: the time ``save`` blocks the loop (the
  staging copy), and the time until the checkpoint is committed;
* ``save(state, step, sharded=True)``, blocking and not: every rank writes its share through
  ``torch.distributed.checkpoint`` (DCP spreads the replicated tensors over the ranks) and rank 0
  commits;
* ``load_latest()`` on every rank (each reads the whole file, as DDP ranks resume), and
  ``load_latest(state_dict=...)`` of the sharded checkpoint (each rank reads its part);

against the floor: the same bytes (``torch.save`` of the state) written by one process with a plain
write and ``fsync`` (what ``dd conv=fsync`` does) to the volume, or uploaded with s3fs's
``pipe_file``, a multipart upload of 50 MiB parts, 10 in flight, as ``aws s3 cp`` does, to the S3
server; and the same bytes split over the ranks, each writing its share at once (the floor a
sharded save could reach).

Every world runs all of its measurements in each round, in ABBA order (reversed every other round),
so a drift in the load of this shared machine hits them alike; each ratio is taken within its round
and the report gives the median of the rounds' ratios. Each manager keeps one checkpoint (``keep=1``),
so a save pays for deleting its predecessor, as a job's saves do.

Targets (issue 37): async blocks the loop for at most 10% of the sync save's time at 500 MB and up;
a sharded save with 4 ranks at least 2x faster than rank 0's save of the same state; a commit within
1.2x of the raw upload.

Usage: eval "$(kubetrain dev object-store)"; python benchmarks/checkpoint_io.py [--sizes 50MB,500MB
--ranks 1,2,4 --targets volume,s3 --rounds 3]. Results go to benchmarks/results/checkpoint_io.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubetrain.devcluster.process import free_port

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = 8 * 2**20  # bytes per tensor of the state: a model's many parameters, not one blob
ASYNC_SHARE = 0.10  # the targets
SHARDED_SPEEDUP = 2.0
COMMIT_RATIO = 1.2
TARGET_SIZE = 500e6  # the async target holds from this size up
OPS = ("floor", "floor_parallel", "save", "save_async", "sharded", "sharded_async", "load", "load_sharded")
UNITS = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]i?b)\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 50MB, 2GB, 512MiB)")
    return int(float(match[1]) * UNITS[match[2]])


def label(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:g}{unit}"
    return f"{nbytes}B"


def make_state(nbytes: int) -> dict[str, Any]:
    """A model's state of ``nbytes``: float32 tensors of at most CHUNK bytes each."""
    import torch

    generator = torch.Generator().manual_seed(0)
    tensors, left, i = {}, nbytes, 0
    while left > 0:
        count = max(1, min(CHUNK, left) // 4)
        tensors[f"layer{i}.weight"] = torch.rand(count, generator=generator)
        left -= count * 4
        i += 1
    return {"model": tensors}


# -- one world of ranks ----------------------------------------------------------------------------
class Target:
    """Where a world writes: the raw floor writes and the checkpoint managers' locations."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.kind = config["target"]
        self.base = config["base"]
        self.options = config.get("storage_options") or {}
        self.fs: Any = None
        if self.kind == "s3":
            import fsspec

            self.fs = fsspec.filesystem("s3", skip_instance_cache=True, **self.options)

    def location(self, name: str) -> str:
        return f"{self.base}/{name}"

    def manager(self, name: str) -> Any:
        from kubetrain.checkpoint import CheckpointManager

        if self.kind == "s3":
            return CheckpointManager(self.location(name), keep=1, storage_options=self.options)
        return CheckpointManager(self.location(name), keep=1)

    def raw_write(self, name: str, data: bytes) -> None:
        """The floor: ``data`` written and made durable, nothing else."""
        path = self.location(f"raw/{name}")
        if self.kind == "s3":
            self.fs.pipe_file(path, data)  # multipart: 50 MiB parts, 10 in flight
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def raw_remove(self, name: str) -> None:
        path = self.location(f"raw/{name}")
        if self.kind == "s3":
            self.fs.rm_file(path)
        else:
            os.unlink(path)

    def remove_all(self) -> None:
        if self.kind == "s3":
            if self.fs.exists(self.base):
                self.fs.rm(self.base, recursive=True)
        else:
            shutil.rmtree(self.base, ignore_errors=True)


def world(rank: int, config: dict[str, Any]) -> None:
    """One rank of a world (torch.multiprocessing.spawn): every size and target it is given, each with
    all its rounds; rank 0 writes what it measured to ``config["out"]``."""
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(config["ranks"]),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(config["port"]),
        }
    )
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=config["ranks"])
    measured = []
    for job in config["jobs"]:
        measured.append(Job(rank, config["ranks"], {**config, **job}).run())
    if rank == 0:
        Path(config["out"]).write_text(json.dumps(measured))
    dist.barrier()
    dist.destroy_process_group()


class Job:
    """One rank's measurements of one state size on one target."""

    def __init__(self, rank: int, size: int, config: dict[str, Any]) -> None:
        import io

        import torch

        self.rank, self.size, self.config = rank, size, config
        self.target = Target(config)
        self.state = make_state(config["size"])
        buffer = io.BytesIO()
        torch.save(self.state, buffer)
        self.nbytes = len(buffer.getbuffer())
        self.payload = buffer.getvalue() if rank == 0 else b""  # the bytes the rank-0 save writes
        del buffer
        tensors = list(self.state["model"].values())
        # a rank's part of the same bytes, spread over the ranks as DCP spreads replicated tensors
        self.share = b"".join(t.numpy().tobytes() for t in tensors[rank::size])
        self.managers = {
            op: self.target.manager(op) for op in ("save", "save_async", "sharded", "sharded_async")
        }

    def slowest(self, seconds: float) -> float:
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, seconds)
        return max(gathered)

    def timed(self, work: Callable[[], Any]) -> float:
        import torch.distributed as dist

        dist.barrier()
        started = time.perf_counter()
        work()
        return self.slowest(time.perf_counter() - started)

    def timed_async(self, op: str, step: int) -> tuple[float, float]:
        """How long ``save(..., blocking=False)`` blocked, and how long until ``wait()`` returned."""
        import torch.distributed as dist

        manager = self.managers[op]
        dist.barrier()
        started = time.perf_counter()
        manager.save(self.state, step, sharded=op == "sharded_async", blocking=False)
        blocked = time.perf_counter() - started
        manager.wait()
        committed = time.perf_counter() - started
        return self.slowest(blocked), self.slowest(committed)

    def floor(self, name: str, data: bytes) -> float:
        took = self.timed(lambda: self.target.raw_write(name, data) if data else None)
        if data:
            self.target.raw_remove(name)
        return took

    def measure(self, op: str, step: int, found: dict[str, float]) -> None:
        if op == "floor":
            found["floor"] = self.floor("rank0", self.payload)
        elif op == "floor_parallel" and self.size > 1:
            found["floor_parallel"] = self.floor(f"rank{self.rank}", self.share)
        elif op in ("save", "sharded"):
            manager = self.managers[op]
            found[op] = self.timed(lambda: manager.save(self.state, step, sharded=op == "sharded"))
        elif op in ("save_async", "sharded_async"):
            found[f"{op}_blocked"], found[f"{op}_commit"] = self.timed_async(op, step)
        elif op == "load":
            found["load"] = self.timed(self.managers["save"].load_latest)
        elif op == "load_sharded":
            found["load_sharded"] = self.timed(
                lambda: self.managers["sharded"].load_latest(state_dict=self.state)
            )

    def warm_up(self) -> None:
        """First use: imports, the background group, the store's session; not measured."""
        import torch

        tiny = {"model": {"w": torch.zeros(4)}}
        for op, manager in self.managers.items():
            manager.save(tiny, 0, sharded=op.startswith("sharded"), blocking=not op.endswith("async"))
            manager.wait()
        self.floor("warm-up", b"x" if self.rank == 0 else b"")

    def run(self) -> dict[str, Any]:
        """Every measurement, ``rounds`` times, in ABBA order."""
        import torch.distributed as dist

        self.warm_up()
        rounds = []
        for r in range(self.config["rounds"]):
            order = OPS if r % 2 == 0 else tuple(reversed(OPS))  # reversed: loads read the round before's
            found: dict[str, float] = {}
            for op in order:
                self.measure(op, r + 1, found)
            rounds.append(found)
            if self.rank == 0:
                print(
                    f"  {self.config['target']} {label(self.config['size'])} x {self.size} ranks, round "
                    f"{r + 1}/{self.config['rounds']}: "
                    + ", ".join(f"{k} {v:.2f}s" for k, v in found.items()),
                    flush=True,
                )
        dist.barrier()
        if self.rank == 0:
            self.target.remove_all()
        return {"bytes": self.nbytes, "rounds": rounds}


def available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def run_world(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Start a world of ``config["ranks"]`` processes; what it measured, a job at a time."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "world.json"
        mp.spawn(world, args=({**config, "out": str(out), "port": free_port()},), nprocs=config["ranks"])
        found: list[dict[str, Any]] = json.loads(out.read_text())
        return found


# -- the report ------------------------------------------------------------------------------------
RATIOS = {  # name: (numerator, denominator), taken within each round
    "save_vs_floor": ("save", "floor"),
    "save_async_commit_vs_floor": ("save_async_commit", "floor"),
    "sharded_vs_floor": ("sharded", "floor"),
    "save_async_blocked_share": ("save_async_blocked", "save"),
    "sharded_async_blocked_share": ("sharded_async_blocked", "sharded"),
    "sharded_speedup": ("save", "sharded"),
    "sharded_async_commit_speedup": ("save_async_commit", "sharded_async_commit"),
    "floor_parallel_speedup": ("floor", "floor_parallel"),
}


def summarise(rounds: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Medians of each figure and of each ratio of the rounds' pairs."""
    keys = sorted({k for r in rounds for k in r})
    medians = {k: statistics.median(r[k] for r in rounds if k in r) for k in keys}
    ratios = {}
    for name, (top, bottom) in RATIOS.items():
        paired = [r[top] / r[bottom] for r in rounds if top in r and bottom in r and r[bottom] > 0]
        if paired:
            ratios[name] = statistics.median(paired)
    return medians, ratios


def targets(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target, for each run it applies to, with the measured ratio and met or missed."""
    checked = []
    smallest = min(r["ranks"] for r in runs) if runs else 1
    for run in runs:
        if "skipped" in run:
            continue
        where = f"{run['target']}, {label(run['size'])}, {run['ranks']} rank{'s' * (run['ranks'] > 1)}"
        ratios = run["ratios"]

        def check(goal: str, value: float | None, ok: Callable[[float], bool], where: str = where) -> None:
            if value is not None:
                checked.append({"target": goal, "where": where, "value": round(value, 3), "met": ok(value)})

        if run["size"] >= TARGET_SIZE:
            if run["ranks"] == smallest:
                check(
                    "async save blocks <= 10% of the sync save",
                    ratios.get("save_async_blocked_share"),
                    lambda v: v <= ASYNC_SHARE,
                )
            check(
                "async sharded save blocks <= 10% of the sync sharded save",
                ratios.get("sharded_async_blocked_share"),
                lambda v: v <= ASYNC_SHARE,
            )
        if run["ranks"] == 4:
            check(
                "sharded save with 4 ranks >= 2x faster than rank 0's",
                ratios.get("sharded_speedup"),
                lambda v: v >= SHARDED_SPEEDUP,
            )
        if run["ranks"] == smallest:
            check(
                "commit (sync save) <= 1.2x the raw write",
                ratios.get("save_vs_floor"),
                lambda v: v <= COMMIT_RATIO,
            )
            check(
                "commit (async save, save to committed) <= 1.2x the raw write",
                ratios.get("save_async_commit_vs_floor"),
                lambda v: v <= COMMIT_RATIO,
            )
    return checked


def _s(medians: dict[str, float], key: str) -> str:
    return f"{medians[key]:.2f}" if key in medians else "-"


def _x(ratios: dict[str, float], key: str, percent: bool = False) -> str:
    if key not in ratios:
        return "-"
    return f"{100 * ratios[key]:.0f}%" if percent else f"{ratios[key]:.2f}x"


def report(result: dict[str, Any]) -> str:
    args = result["config"]
    lines = [
        "# Checkpoint I/O",
        "",
        f"`CheckpointManager` saves and loads of a state of float32 CPU tensors, {args['rounds']} rounds in "
        "ABBA order; seconds are medians over the rounds, ratios the medians of each round's ratio. "
        "A multi-rank figure is the slowest rank's. The floor is the same bytes written by one process "
        "(volume: write + fsync; S3: s3fs multipart `pipe_file`); the parallel floor, the bytes split "
        "over the ranks, all writing at once.",
        "",
    ]
    for kind in args["targets"]:
        runs = [r for r in result["runs"] if r["target"] == kind]
        if not runs:
            continue
        lines += [
            f"## {'the volume (local disk)' if kind == 'volume' else 'the S3 server'}",
            "",
            "| size | ranks | floor s | parallel floor s | save s (x floor) | async: blocked s (% of save) "
            "| async: committed s (x floor) | sharded save s (speedup vs save) | sharded async: blocked s "
            "(% of sharded save) | sharded async: committed s | load s | sharded load s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for run in runs:
            if "skipped" in run:
                lines.append(f"| {label(run['size'])} | {run['ranks']} | skipped: {run['skipped']} |")
                continue
            m, x = run["median"], run["ratios"]
            lines.append(
                f"| {label(run['size'])} | {run['ranks']} | {_s(m, 'floor')} | {_s(m, 'floor_parallel')} "
                f"| {_s(m, 'save')} ({_x(x, 'save_vs_floor')}) "
                f"| {_s(m, 'save_async_blocked')} ({_x(x, 'save_async_blocked_share', True)}) "
                f"| {_s(m, 'save_async_commit')} ({_x(x, 'save_async_commit_vs_floor')}) "
                f"| {_s(m, 'sharded')} ({_x(x, 'sharded_speedup')}) "
                f"| {_s(m, 'sharded_async_blocked')} ({_x(x, 'sharded_async_blocked_share', True)}) "
                f"| {_s(m, 'sharded_async_commit')} | {_s(m, 'load')} | {_s(m, 'load_sharded')} |"
            )
        lines.append("")
    lines += ["## Targets", "", "| target | where | measured | |", "|---|---|---|---|"]
    for t in result["targets"]:
        value = f"{100 * t['value']:.0f}%" if "10%" in t["target"] else f"{t['value']:.2f}x"
        lines.append(f"| {t['target']} | {t['where']} | {value} | {'met' if t['met'] else 'missed'} |")
    env = result["environment"]
    lines += [
        "",
        f"{env['cpus']} CPUs, {env['memory_gib']} GiB, torch {env['torch']}, s3fs {env['s3fs']}, "
        f"load average {env['load_before']} before and {env['load_after']} after; "
        f"{env['started']}, {env['seconds']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in result["config"]["targets"] if any(r["target"] == k for r in result["runs"])]
    shown = [
        ("floor", "floor"),
        ("save", "save"),
        ("save_async_blocked", "async: blocked"),
        ("save_async_commit", "async: committed"),
        ("sharded", "sharded save"),
        ("sharded_async_blocked", "sharded async: blocked"),
        ("load", "load"),
        ("load_sharded", "sharded load"),
    ]
    fig, axes = plt.subplots(len(kinds), 1, figsize=(11, 4 * max(1, len(kinds))), squeeze=False)
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        runs = [r for r in result["runs"] if r["target"] == kind and "skipped" not in r]
        width = 0.8 / len(shown)
        for i, (key, name) in enumerate(shown):
            xs = [j + i * width for j in range(len(runs))]
            ys = [r["median"].get(key, 0.0) for r in runs]
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(runs))])
        ax.set_xticklabels([f"{label(r['size'])}\n{r['ranks']} rank(s)" for r in runs])
        ax.set_yscale("log")
        ax.set_ylabel("seconds (median)")
        ax.set_title(
            f"Checkpoint save and load, {'volume (local disk)' if kind == 'volume' else 'S3 server'}"
        )
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="50MB,500MB", help="state sizes, e.g. 50MB,500MB,2GB")
    parser.add_argument("--ranks", default="1,2,4", help="world sizes (processes on this machine, gloo)")
    parser.add_argument("--targets", default="volume,s3", help="volume, s3 or both")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every measurement (ABBA)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the results go")
    parser.add_argument(
        "--volume-dir", type=Path, default=None, help="a directory on the volume (a temporary one)"
    )
    parser.add_argument(
        "--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"), help="the S3 server ($AWS_ENDPOINT_URL)"
    )
    parser.add_argument("--bucket", default="kubetrain", help="a bucket of the S3 server (the dev cluster's)")
    parser.add_argument(
        "--prefix", default=f"checkpoint-bench/{uuid.uuid4().hex[:8]}", help="deleted afterwards"
    )
    args = parser.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    args.ranks = [int(r) for r in args.ranks.split(",") if r.strip()]
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown := set(args.targets) - {"volume", "s3"}:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    args.options = {}
    if "s3" in args.targets:
        if not args.endpoint:
            parser.error('no S3 server: pass --endpoint, or eval "$(kubetrain dev object-store)" first')
        args.options = {"endpoint_url": args.endpoint}
        if os.environ.get("AWS_ACCESS_KEY_ID"):  # else s3fs finds credentials as boto does
            args.options |= {
                "key": os.environ["AWS_ACCESS_KEY_ID"],
                "secret": os.environ.get("AWS_SECRET_ACCESS_KEY"),
            }
    return args


def plan(
    args: argparse.Namespace, ranks: int, volume: Path, console: Any
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The runs of one world: (the run's record, what the world is told) for each size and target."""
    jobs = []
    for nbytes in args.sizes:
        for kind in args.targets:
            run: dict[str, Any] = {"target": kind, "size": nbytes, "ranks": ranks}
            # each rank holds the state and its share; rank 0 the bytes, a staging copy; a load another
            needed = nbytes * (2 * ranks + 3)
            if needed > available_memory():
                run["skipped"] = f"needs about {needed / 2**30:.0f} GiB of memory, more than is free"
                console.print(f"[yellow]{kind} {label(nbytes)} x {ranks}: {run['skipped']}")
            base = (
                f"s3://{args.bucket}/{args.prefix}/{label(nbytes)}-{ranks}"
                if kind == "s3"
                else str(volume / f"{label(nbytes)}-{ranks}")
            )
            jobs.append((run, {"target": kind, "size": nbytes, "base": base}))
    return jobs


def measure_all(args: argparse.Namespace, volume: Path, console: Any) -> list[dict[str, Any]]:
    runs = []
    for ranks in args.ranks:  # one world of processes each: torch's start-up is paid once
        jobs = plan(args, ranks, volume, console)
        runs += [run for run, _ in jobs]
        jobs = [(run, job) for run, job in jobs if "skipped" not in run]
        if not jobs:
            continue
        config = {
            "ranks": ranks,
            "rounds": args.rounds,
            "storage_options": args.options,
            "jobs": [j for _, j in jobs],
        }
        with console.status(f"{ranks} rank(s): {len(jobs)} size and target pairs, {args.rounds} rounds each"):
            found = run_world(config)
        for (run, _), measured in zip(jobs, found, strict=True):
            run["bytes"] = measured["bytes"]
            run["rounds"] = measured["rounds"]
            run["median"], run["ratios"] = summarise(measured["rounds"])
    order = {k: i for i, k in enumerate(args.targets)}
    return sorted(runs, key=lambda r: (order[r["target"]], r["size"], r["ranks"]))


def clean_up(args: argparse.Namespace, volume: Path) -> None:
    """Delete what this run wrote: the temporary directory, the prefix in the bucket."""
    if args.volume_dir is None:
        shutil.rmtree(volume, ignore_errors=True)
    if "s3" in args.targets:
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True, **args.options)
        if fs.exists(f"{args.bucket}/{args.prefix}"):
            fs.rm(f"{args.bucket}/{args.prefix}", recursive=True)


def main() -> None:
    args = parse_args()
    import s3fs
    import torch
    from rich.console import Console

    console = Console()
    started, clock = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.perf_counter()
    load_before = round(os.getloadavg()[0], 2)
    volume = args.volume_dir or Path(tempfile.mkdtemp(prefix="kubetrain-checkpoint-bench-"))
    try:
        runs = measure_all(args, volume, console)
    finally:
        clean_up(args, volume)
    result = {
        "config": {
            "sizes": args.sizes,
            "ranks": args.ranks,
            "targets": args.targets,
            "rounds": args.rounds,
            "endpoint": args.endpoint if "s3" in args.targets else None,
        },
        "runs": runs,
        "targets": targets(runs),
        "environment": {
            "cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
            "torch": torch.__version__,
            "s3fs": s3fs.__version__,
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": round(os.getloadavg()[0], 2),
            "started": started,
            "seconds": time.perf_counter() - clock,
        },
    }
    results: Path = args.results
    results.mkdir(parents=True, exist_ok=True)
    (results / "checkpoint_io.json").write_text(json.dumps(result, indent=1) + "\n")
    table = report(result)
    (results / "checkpoint_io.md").write_text(table)
    plot(result, results / "checkpoint_io.png")
    console.print(table)
    console.print(f"results in {results}/checkpoint_io.{{json,md,png}}")


if __name__ == "__main__":
    main()
