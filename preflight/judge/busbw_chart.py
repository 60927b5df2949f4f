"""The busbw-vs-message-size chart as a ``chart`` view: SVG geometry computed here, drawn by
``report/templates/views/chart.html.j2``.

All coordinates are numbers and all labels plain strings in the view's JSON data, so the template
emits ``<svg>`` elements with Jinja's autoescaping on every value: no markup travels through the
report, no script, nothing loaded from outside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from preflight.judge.busbw_reference import Expectation
from preflight.judge.nccl import human_bytes
from preflight.outcome import View
from preflight.probe.sweep import SweepRun

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 36, 16, 44
MAX_X_LABELS = 8  # beyond this many sizes, every other tick is labelled so labels do not overlap
COLORS = ("#0a58ca", "#b3261e", "#1e7f3c", "#6b1f8f")


def _nice_step(span: float) -> float:
    """A 1/2/5 x 10^k step giving about five ticks over ``span``."""
    raw = span / 5 if span > 0 else 1.0
    power: float = 10 ** math.floor(math.log10(raw))  # an int for k >= 0, as before; a float below
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def busbw_chart(
    runs: Sequence[SweepRun], expected: Expectation | None, title: str = "All-reduce busbw by message size"
) -> View:
    """Both runs' busbw against message size (log scale), with the expected figure as a dashed line."""
    sizes = sorted({s.bytes for run in runs for s in run.sizes})
    top_value = max(
        [s.busbw_gbps for run in runs for s in run.sizes] + [expected.busbw_gbps if expected else 0.0] + [0.0]
    )
    step = _nice_step(top_value * 1.1 or 1.0)
    y_max = step * math.ceil((top_value * 1.1 or 1.0) / step)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    lo = math.log2(sizes[0]) if sizes else 0.0
    hi = math.log2(sizes[-1]) if sizes else 1.0

    def x_of(nbytes: int) -> float:
        if hi == lo:
            return (x0 + x1) / 2
        return round(x0 + (math.log2(nbytes) - lo) / (hi - lo) * (x1 - x0), 1)

    def y_of(value: float) -> float:
        return round(y0 - value / y_max * (y0 - y1), 1)

    series: list[dict[str, Any]] = []
    for index, run in enumerate(runs):
        if not run.sizes:
            continue
        ordered = sorted(run.sizes, key=lambda s: s.bytes)
        markers = [{"x": x_of(s.bytes), "y": y_of(s.busbw_gbps),
                    "title": f"{run.label}: {human_bytes(s.bytes)}, {s.busbw_gbps:.2f} GB/s busbw"} for s in ordered]
        series.append({
            "label": f"{run.label} (peak {max(s.busbw_gbps for s in ordered):.1f} GB/s)",
            "color": COLORS[index % len(COLORS)],
            "points": " ".join(f"{m['x']},{m['y']}" for m in markers),
            "markers": markers,
        })
    ticks_y = [{"y": y_of(v), "label": f"{v:g}"} for v in _frange(0.0, y_max, step)]
    every = 2 if len(sizes) > MAX_X_LABELS else 1
    ticks_x = [{"x": x_of(n), "label": human_bytes(n) if i % every == 0 else ""} for i, n in enumerate(sizes)]
    line = None
    if expected is not None:
        line = {"y": y_of(expected.busbw_gbps), "label": f"expected {expected.busbw_gbps:g} GB/s ({expected.platform})"}
    return View("chart", title, {
        "width": WIDTH, "height": HEIGHT, "plot": {"x0": x0, "x1": x1, "y0": y0, "y1": y1},
        "series": series, "xticks": ticks_x, "yticks": ticks_y, "expected": line,
        "x_label": "message size (bytes per rank, log scale)", "y_label": "busbw GB/s",
    })


def _frange(start: float, stop: float, step: float) -> list[float]:
    """``start, start+step, ... <= stop`` without float drift."""
    count = int(round((stop - start) / step))
    return [round(start + i * step, 10) for i in range(count + 1)]
