"""The ``matrix`` view partial: a coloured grid, escaped, self-contained."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from preflight.judge.topology import judge_layout
from preflight.parse.topo import parse_topo_matrix
from preflight.report.html import _environment


def _render(view: dict[str, Any]) -> str:
    return _environment().get_template("views/matrix.html.j2").render(view=view)


def test_each_link_kind_gets_its_colour_class() -> None:
    codes = ["X", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "OK"]
    html = _render({"kind": "matrix", "title": "t", "data": {"labels": codes, "cells": [codes] * len(codes)}})
    classes = re.findall(r'<td class="([^"]+)" title="X to [^"]+: ([^"]+)">', html)
    assert classes == [
        ("pfm-self", "X"), ("pfm-nv", "NV12"), ("pfm-pix", "PIX"), ("pfm-pxb", "PXB"), ("pfm-phb", "PHB"),
        ("pfm-node", "NODE"), ("pfm-sys", "SYS"), ("pfm-sys", "SOC"), ("pfm-other", "OK"),
    ]


def test_values_are_escaped_and_nothing_is_loaded() -> None:
    html = _render({"kind": "matrix", "title": "<b>t</b>", "data": {
        "labels": ["<script>", "GPU1"], "cells": [["X", "<i>"], ["<i>", "X"]], "summary": "a & b"}})
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<i>" not in html and "a &amp; b" in html
    assert not re.search(r"(src|href)=|@import|url\(", html)
    assert "<script" not in html


def test_a_layout_verdict_view_renders_the_real_grid(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "topo" / "8xA100-PCIe-NV12-bridge-pairs-NODE-SYS.txt").read_text()
    (view,) = judge_layout(parse_topo_matrix(text)).views
    html = _render(view.as_dict())
    assert html.count('<td class="pfm-nv"') == 8
    assert html.count('<td class="pfm-sys"') == 32
    assert html.count('<td class="pfm-node"') == 16
    assert "only within pairs (0-1, 2-3, 4-5, 6-7)" in html
    assert html.count("<style>") == 1 and ".pf-matrix .pfm-nv" in html
