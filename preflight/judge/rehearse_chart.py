"""Throughput against rank count as a ``chart`` view (drawn by ``views/chart.html.j2``): the
measured throughput and the linear line from the baseline. Numbers and plain strings only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from preflight.judge.busbw_chart import HEIGHT, WIDTH, _frange, _nice_step
from preflight.judge.rehearse import ScalingRow
from preflight.outcome import View

LEFT, RIGHT, TOP, BOTTOM = 56, 36, 16, 44
MEASURED, LINEAR = "#0a58ca", "#6e6e73"


def scaling_chart(rows: Sequence[ScalingRow]) -> View:
    """Per-rank batches per second at each size (log2 rank axis), beside linear scaling."""
    base = rows[0]
    linear = {r.nproc: base.throughput * r.linear for r in rows}
    top = max([r.throughput for r in rows] + list(linear.values()) + [0.0]) * 1.1 or 1.0
    step = _nice_step(top)
    y_max = step * math.ceil(top / step)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    lo, hi = math.log2(rows[0].nproc), math.log2(rows[-1].nproc)

    def x_of(nproc: int) -> float:
        return (x0 + x1) / 2 if hi == lo else round(x0 + (math.log2(nproc) - lo) / (hi - lo) * (x1 - x0), 1)

    def y_of(value: float) -> float:
        return round(y0 - value / y_max * (y0 - y1), 1)

    series: list[dict[str, Any]] = []
    for label, color, values in (
        (f"linear from {base.nproc} rank{'s' if base.nproc > 1 else ''}", LINEAR, linear),
        ("measured", MEASURED, {r.nproc: r.throughput for r in rows}),
    ):
        markers = [{"x": x_of(n), "y": y_of(v), "title": f"{label}: {n} ranks, {v:.3g} batches/s"}
                   for n, v in sorted(values.items())]
        series.append({"label": label, "color": color, "points": " ".join(f"{m['x']},{m['y']}" for m in markers),
                       "markers": markers})
    return View("chart", "Throughput by rank count (per-rank batches per second)", {
        "width": WIDTH, "height": HEIGHT, "plot": {"x0": x0, "x1": x1, "y0": y0, "y1": y1}, "series": series,
        "xticks": [{"x": x_of(r.nproc), "label": str(r.nproc)} for r in rows],
        "yticks": [{"y": y_of(v), "label": f"{v:g}"} for v in _frange(0.0, y_max, step)],
        "expected": None, "x_label": "ranks (log scale)", "y_label": "batches/s",
    })
