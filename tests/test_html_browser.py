"""The HTML report in a real browser (Debian's headless Chromium): at 1400 and 390 px wide the page
is no wider than the viewport and the verdict is in the first screen, with the passing checks folded
and with every fold opened. Skips, saying why, when chromium is not installed (`.ci/run` installs it).

The report itself carries no script (its CSP forbids them). The measuring is done by a wrapper page
of the test's own that loads the report in an iframe of the viewport's size and writes what it
measured into its own DOM, which ``--dump-dom`` prints; ``--allow-file-access-from-files`` lets the
wrapper read the iframe's document on file://. Screenshots of both widths are kept in tmp_path.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from preflight.outcome import Metric, Verdict, View, fail, passed, skip, warn
from preflight.report.html import render_html
from preflight.report.model import CheckResult, RunRecord, build_report
from tests.conftest import validate_report
from tests.fleet_reports import node_facts

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"),
]
SIZES = ((1400, 900), (390, 844))
PER_GPU = ("gpu_responds", "gpu_not_busy", "gpu_ecc", "gpu_memory_repairs", "gpu_mig", "gpu_persistence",
           "gpu_throttling", "gpu_pcie_link")

WRAPPER = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>body{margin:0} iframe{border:0;display:block}</style></head><body>
%(frames)s
<script>
function measure(doc, win) {
  var root = doc.documentElement, verdict = doc.querySelector("header.verdict").getBoundingClientRect();
  var wide = [];
  doc.querySelectorAll("body *").forEach(function (el) {
    var box = el.getBoundingClientRect();
    if (box.right > win.innerWidth + 0.5 && el.closest(".scroll, .view-table, .pf-matrix, .view-chart, pre") === null)
      wide.push(el.tagName + "." + el.className + " " + Math.round(box.right));
  });
  return {scrollWidth: root.scrollWidth, innerWidth: win.innerWidth, innerHeight: win.innerHeight,
          verdictTop: verdict.top, verdictBottom: verdict.bottom, wide: wide.slice(0, 10),
          openDetails: doc.querySelectorAll("details[open]").length};
}
window.addEventListener("load", function () {
  var results = {};
  document.querySelectorAll("iframe").forEach(function (frame) {
    var doc = frame.contentDocument, win = frame.contentWindow, result = {folded: measure(doc, win)};
    doc.querySelectorAll("details").forEach(function (d) { d.open = true; });
    result.unfolded = measure(doc, win);
    results[frame.dataset.width] = result;
  });
  var out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(results);
  document.body.appendChild(out);
});
</script></body></html>
"""
FRAME = '<iframe data-width="%(width)d" src="preflight.html" style="width:%(width)dpx;height:%(height)dpx"></iframe>'


def eight_gpu_report() -> dict[str, Any]:
    """A report as an 8-GPU H100 node writes it: the node block from the node model over the fake
    machine, per-GPU checks with their real ids, problems whose fixes quote commands, byte metrics,
    a topology matrix and a wide table view."""
    record = RunRecord(argv=["preflight", "--profile", "quick", "--report-dir", "/home/ubuntu/preflight-reports"])
    labels = [f"GPU{i}" for i in range(8)]
    matrix = View("matrix", "GPU interconnect (nvidia-smi topo -m)",
                  {"labels": labels, "cells": [["X" if i == j else "NV18" for j in range(8)] for i in range(8)],
                   "summary": "every GPU pair is linked by 18 NVLinks"})
    table = View("table", "GPU inventory as NVML reports it",
                 {"columns": ["GPU", "name", "bus id", "UUID", "memory", "driver model", "power limit"],
                  "rows": [[i, "NVIDIA H100 80GB HBM3", f"00000000:{0x18 + i * 16:02X}:00.0",
                            f"GPU-19e93ff3-b6a3-36e2-9e05-bf20cf0bb9{i:02d}", "81559 MiB", "N/A", "700.00 W"]
                           for i in range(8)], "highlight": [3]})
    checks: list[tuple[str, str, Verdict]] = [
        ("test_devices.py::test_nvml", "NVML answers", passed("NVML 12.550.54.15 answered in 0.09 s", views=(table,))),
        ("test_topology.py::test_topology", "GPU interconnect", passed("NVLink between all 8 GPUs", views=(matrix,))),
        ("test_host.py::test_shared_memory", "Shared memory for DataLoader workers",
         passed("/dev/shm has 1.26 TB free", metrics=(Metric("shm_total_bytes", 1_260_000_000_000, "B"),))),
        ("test_host.py::test_checkpoint_disk", "Checkpoint disk", fail(
            "CHECKPOINT_DISK_TOO_SMALL", "/workspace/checkpoints/llama-3-70b-run-2026-12-01 has 50 GB free for a "
            "7B model's checkpoints (about 126 GB each)",
            "Point the job's checkpoints at a larger volume, e.g. `--checkpoint-dir /mnt/nvme0/checkpoints`, or "
            "mount one: `sudo mount /dev/nvme1n1 /mnt/nvme0`",
            metrics=(Metric("checkpoint_disk_free_bytes", 50_000_000_000, "B"),))),
        ("test_host.py::test_rendezvous_port_free", "The default rendezvous port 29500 is free",
         warn("RENDEZVOUS_PORT_IN_USE", "port 29500, where the job's rendezvous listens (MASTER_PORT=29500 is set), "
              "is taken (pid 4242)", "Find the owner with `ss -ltnp 'sport = :29500'` and stop it if stale")),
        ("test_cuda_toolkit.py::test_cuda_toolkit_for_jit_builds", "CUDA toolkit for JIT builds",
         skip("no CUDA toolkit for torch's CUDA 12.4: CUDA_HOME is unset and /usr/local/cuda does not exist - not "
              "needed here: plain DDP/FSDP need no toolkit (--with deepspeed makes it count)")),
    ]
    checks += [(f"test_devices.py::test_{name}[gpu{i}]", name.replace("_", " "), passed(f"GPU {i}: {name} ok"))
               for name in PER_GPU for i in range(8)]
    for nodeid, title, verdict in checks:
        record.collected.append(nodeid)
        record.add(CheckResult(id=nodeid, name=nodeid.split("::")[1], title=title, group=nodeid.split("::")[0],
                               verdict=verdict, duration_s=0.12))
    node = node_facts("gpu-node-17.example.internal", "NVIDIA H100 80GB HBM3", 8)
    report = build_report(record, node=node, environment={"NCCL_DEBUG": "WARN"}, options={"profile": "quick"},
                          exit_code=1)
    validate_report(report)
    return report


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("html")
    (folder / "preflight.html").write_text(render_html(eight_gpu_report()))
    return folder


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-extensions", *args],
                          capture_output=True, text=True, timeout=60)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


@pytest.fixture(scope="module")
def measured(rendered: Path) -> dict[str, Any]:
    """What the wrapper measured in one browser run: both widths, folded and with every fold open."""
    wrapper = rendered / "measure.html"
    wrapper.write_text(WRAPPER % {"frames": "\n".join(FRAME % {"width": w, "height": h} for w, h in SIZES)})
    run = chromium("--allow-file-access-from-files", "--virtual-time-budget=5000", "--window-size=1500,1800",
                   "--dump-dom", wrapper.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', run.stdout, re.S)
    assert found, f"the wrapper measured nothing: {run.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}px" for w, _ in SIZES])
def test_page_fits_the_viewport_and_shows_the_verdict_first(
    rendered: Path, measured: dict[str, Any], width: int, height: int
) -> None:
    for state in ("folded", "unfolded"):
        m = measured[str(width)][state]
        assert m["innerWidth"] == width, m
        assert m["scrollWidth"] <= width, f"{state}: page is {m['scrollWidth']} px wide in a {width} px viewport: {m['wide']}"
        assert m["wide"] == [], f"{state}: elements past the right edge: {m['wide']}"
    first = measured[str(width)]["folded"]
    assert first["verdictTop"] >= 0 and first["verdictBottom"] <= height, first
    assert first["openDetails"] == 1  # only "Needs attention" opens by itself; passing checks stay folded

    shot = rendered / f"preflight-{width}.png"
    taken = chromium(f"--screenshot={shot}", f"--window-size={width},{height}", (rendered / "preflight.html").as_uri())
    assert shot.is_file(), taken.stderr[-2000:]
    assert png_size(shot) == (width, height)


def test_report_html_has_the_headline_and_readable_values(rendered: Path) -> None:
    page = (rendered / "preflight.html").read_text()
    assert "<script" not in page
    headline = re.search(r'<div class="headline">(.*?)</div>', page, re.S)
    assert headline
    text = re.sub(r"<[^>]+>", " ", headline.group(1))
    for part in ("8 × NVIDIA H100 80GB HBM3", "driver 550.54.15", "CUDA 12.4 (driver)", "torch 2.4.1+cu124"):
        assert part in text, text
    assert "1.26 TB" in page and "1260000000000" not in page
    assert "<code>ss -ltnp &#39;sport = :29500&#39;</code>" in page and "`" not in page
    assert "memory_mib" not in page and "temp_c" not in page and "temperature_c" not in page
    assert '<details class="group" open><summary>Needs attention (2)</summary>' in page
    assert '<details class="group"><summary>Passed (' in page
