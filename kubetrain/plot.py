"""Metric curves of a lineage's attempts in one PNG: where each attempt started, stopped and resumed.

The curves come from rank 0's log, the one record every attempt leaves whatever wrote it: a line that
says ``step=N`` and then ``name=number`` pairs (``training step=40 loss=0.1234 acc=0.91``, what
``examples/train_ddp.py`` prints) is a point of each named metric. Progress reports keep only the
latest value, and the checkpoint directory's history may be on a volume the user cannot read, so the
log is the source that works from a laptop. Rendering needs matplotlib (``pip install
'kubetrain[plot]'``); parsing does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

STEP = re.compile(r"\bstep[=:]\s*(\d+)")
PAIR = re.compile(r"\b([A-Za-z_][\w.]*)=(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w.])")
MAX_PANELS = 4


@dataclass
class Curve:
    """One attempt's points, per metric: ``{"loss": [(step, value), ...]}``."""

    attempt: str  # the job's name, e.g. mnist-a2
    failed: bool = False
    points: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def parse(log: str) -> dict[str, list[tuple[int, float]]]:
    """Every ``step=N name=value`` line of ``log`` as points of each named metric, in log order."""
    found: dict[str, list[tuple[int, float]]] = {}
    for line in log.splitlines():
        step = STEP.search(line)
        if step is None:
            continue
        for name, value in PAIR.findall(line[step.end() :]):
            found.setdefault(name, []).append((int(step[1]), float(value)))
    return found


def merged(*runs: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """The points of several runs of one container (a restart in place: the previous run, then the
    current one), in that order."""
    joined: dict[str, list[tuple[int, float]]] = {}
    for run in runs:
        for name, points in run.items():
            joined.setdefault(name, []).extend(points)
    return joined


def metrics_of(curves: list[Curve]) -> list[str]:
    """The metrics that make a curve (two points or more in some attempt), in the order they first
    appear: a value said once (``done step=200 accuracy=0.91``, ``injected failure step=60 attempt=1``)
    is a fact, not a curve."""
    names: dict[str, None] = {}
    for curve in curves:
        names.update(dict.fromkeys(name for name, points in curve.points.items() if len(points) >= 2))
    return list(names)


def render(curves: list[Curve], target: Path, *, metrics: list[str] | None = None, title: str = "") -> Path:
    """One panel per metric (at most ``MAX_PANELS``), one line per attempt (dashed where it failed)."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'kubetrain[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = (metrics or metrics_of(curves))[:MAX_PANELS]
    if not shown:
        raise ValueError("no metric to plot: no log line of these jobs says step=N name=value")
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 3.2 * len(shown)), squeeze=False, sharex=True)
    for ax, metric in zip(axes[:, 0], shown, strict=True):
        for curve in curves:
            points = curve.points.get(metric)
            if not points:
                continue
            steps, values = zip(*points, strict=True)
            style = {"linestyle": "--", "marker": "x"} if curve.failed else {"marker": "o"}
            label = f"{curve.attempt} (failed)" if curve.failed else curve.attempt
            ax.plot(steps, values, markersize=3, label=label, **style)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=120)
    plt.close(fig)
    return target
