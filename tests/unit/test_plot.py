"""kubetrain plot: which log lines are points, and the PNG of a lineage's attempts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.plot import Curve, metrics_of, parse, render

pytestmark = pytest.mark.unit

ATTEMPT_1 = """\
[rank 0] training step=10 loss=0.9000
[rank 0] checkpoint saved step=10 path=/ckpt/step-10
[rank 0] training step=20 loss=0.7000 lr=1e-3
[rank 0] injected failure step=25 attempt=1
"""
ATTEMPT_2 = """\
[rank 0] resumed from checkpoint step=20
[rank 0] training step=30 loss=0.5000
[rank 0] training step=40 loss=0.4000
[rank 0] done step=40 accuracy=0.9100 loss=0.4000
"""


def test_step_lines_are_points_of_each_number_they_name() -> None:
    points = parse(ATTEMPT_1)
    assert points["loss"] == [(10, 0.9), (20, 0.7)]
    assert points["lr"] == [(20, 0.001)]
    assert "path" not in points  # not a number
    assert points["attempt"] == [(25, 1.0)]


def test_only_values_said_more_than_once_make_a_curve() -> None:
    curves = [
        Curve("mnist-a1", failed=True, points=parse(ATTEMPT_1)),
        Curve("mnist-a2", points=parse(ATTEMPT_2)),
    ]
    assert metrics_of(curves) == ["loss"]


def test_the_png_has_a_panel_per_metric(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    curves = [
        Curve("mnist-a1", failed=True, points=parse(ATTEMPT_1)),
        Curve("mnist-a2", points=parse(ATTEMPT_2)),
    ]
    png = render(curves, tmp_path / "curves.png", title="mnist")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with pytest.raises(ValueError, match="no metric to plot"):
        render([Curve("silent")], tmp_path / "none.png")
