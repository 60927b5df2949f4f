"""The HTML report in a real browser (Debian's headless Chromium): at 1400 and 390 px wide the page
is no wider than the viewport, the heading (the verdict and the worst problem) and the worst problem's
card are in the first screen, the GPU table has a health column with the faulty GPUs marked, topology
matrices stay labelled grids that fit at 390 px, table keys wrap only between words and inline commands
carry no padding that reads as spaces; with the passing checks folded and with every fold opened. Skips,
saying why, when chromium is not installed (`.ci/run` installs it).

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
from preflight.report.document import Report
from preflight.report.html import render_html
from preflight.report.model import CheckResult, RunRecord, build_report
from tests.conftest import validate_report
from tests.fleet_reports import node_facts

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"),
]
SIZES = ((1400, 900), (390, 844))
PER_GPU = ("gpu_responds", "gpu_not_busy", "gpu_ecc", "gpu_memory_repairs", "gpu_mig", "gpu_persistence",
           "gpu_throttling", "gpu_pcie_link")
WORST = "GPU_ROW_REMAP_FAILED"
FAULTY = {(3, "gpu_ecc"): fail("GPU_ECC_UNCORRECTABLE", "GPU 3 (NVIDIA H100 80GB HBM3, 00000000:48:00.0): 2 "
                                "uncorrectable ECC error(s) since the driver loaded",
                                "Do not run on GPU 3: stop its processes and reset it (`sudo nvidia-smi -r -i 3`) "
                                "or reboot. Errors that come back mean RMA."),
          (6, "gpu_memory_repairs"): fail(WORST, "GPU 6 (NVIDIA H100 80GB HBM3, 00000000:78:00.0): a row remap "
                                          "failed (1 uncorrectable-error remaps): no spare rows left",
                                          "GPU 6 needs replacement (RMA): move the job to another node and report "
                                          "it to the provider.")}

WRAPPER = r"""<!DOCTYPE html>
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
  var first = doc.querySelector("div.problem"), firstBox = first.getBoundingClientRect();
  var grids = [];
  doc.querySelectorAll("table.pfm-grid").forEach(function (grid) {
    var box = grid.getBoundingClientRect(), row = grid.rows[1];
    if (box.height === 0) return;  // folded away
    var tops = Array.from(row.cells).map(function (c) { return Math.round(c.getBoundingClientRect().top); });
    grids.push({labels: grid.rows[0].cells.length - 1, rows: grid.rows.length - 1, oneLine: new Set(tops).size === 1,
                width: Math.round(box.width), room: Math.round(grid.closest(".pf-matrix").clientWidth)});
  });
  var broken = [];  // words of a table key split over two lines (a break at a <wbr> is between words)
  doc.querySelectorAll("th").forEach(function (th) {
    var walker = doc.createTreeWalker(th, NodeFilter.SHOW_TEXT), word = /\S+/g, m;
    while (walker.nextNode()) {
      var node = walker.currentNode;
      while ((m = word.exec(node.data))) {
        var range = doc.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        var lines = new Set(Array.from(range.getClientRects()).filter(function (r) { return r.width > 0; })
                            .map(function (r) { return Math.round(r.top); }));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  });
  var padded = Array.from(doc.querySelectorAll(".fix code")).filter(function (c) {
    var style = win.getComputedStyle(c);
    return parseFloat(style.paddingLeft) + parseFloat(style.paddingRight) + parseFloat(style.marginLeft) > 0;
  }).length;
  var gpus = doc.querySelector("table.gpus");
  return {scrollWidth: root.scrollWidth, innerWidth: win.innerWidth, innerHeight: win.innerHeight,
          verdictTop: verdict.top, verdictBottom: verdict.bottom, wide: wide.slice(0, 10),
          openDetails: doc.querySelectorAll("details[open]").length,
          heading: doc.querySelector("header.verdict h1").textContent.trim(),
          firstProblem: first.querySelector(".code").textContent.trim(), firstProblemBottom: firstBox.bottom,
          gpuColumns: Array.from(gpus.rows[0].cells).map(function (c) { return c.textContent.trim(); }),
          faultyRows: Array.from(gpus.querySelectorAll("tr.faulty")).map(function (r) {
            return r.cells[0].textContent.trim() + " " + r.cells[1].textContent.trim(); }),
          faultyColour: gpus.querySelector("tr.faulty td") ?
            win.getComputedStyle(gpus.querySelector("tr.faulty td")).backgroundColor : "",
          grids: grids, brokenWords: broken.slice(0, 10), paddedCommands: padded};
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


def eight_gpu_report() -> Report:
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
    checks += [(f"test_devices.py::test_{name}[gpu{i}]", name.replace("_", " "),
                FAULTY.get((i, name)) or passed(f"GPU {i}: {name} ok")) for name in PER_GPU for i in range(8)]
    node = node_facts("gpu-node-17.example.internal", "NVIDIA H100 80GB HBM3", 8)
    for nodeid, title, verdict in checks:
        record.collected.append(nodeid)
        index = int(nodeid.rsplit("[gpu", 1)[1].rstrip("]")) if "[gpu" in nodeid else None
        facts = node["gpus"]["gpus"][index] if index is not None else {}
        gpu = ({key: facts[key] for key in ("index", "cuda_index", "pci_bus_id", "uuid", "serial", "name")}
               if index is not None else None)  # as Node.gpu_reference gives it
        record.add(CheckResult(id=nodeid, name=nodeid.split("::")[1], title=title, group=nodeid.split("::")[0],
                               verdict=verdict, duration_s=0.12, gpu=gpu))
    node["topology"] = {"source": "nvidia-smi topo -m", "problem": None, "gpus": labels, "nics": {},
                        "links": [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]}
    node["host"] = {"resolved_hostname": "gpu-node-17", "shm_total_bytes": 1_260_000_000_000}
    environment = {"NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
                   "PYTHONPATH": "/home/ubuntu/src/llama-recipes/src:/home/ubuntu/src/llama-recipes"}
    report = build_report(record, node=node, environment=environment, options={"profile": "quick"}, exit_code=1)
    validate_report(report.to_json())
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
    # the heading is the verdict and the worst problem, whose card (with its fix) follows in the first screen
    assert first["heading"] == f"NOT READY: {WORST}" and first["firstProblem"] == WORST, first
    assert first["firstProblemBottom"] <= height, first

    shot = rendered / f"preflight-{width}.png"
    taken = chromium(f"--screenshot={shot}", f"--window-size={width},{height}", (rendered / "preflight.html").as_uri())
    assert shot.is_file(), taken.stderr[-2000:]
    assert png_size(shot) == (width, height)


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}px" for w, _ in SIZES])
def test_the_gpu_table_shows_each_gpus_health_and_marks_the_faulty_ones(measured: dict[str, Any], width: int,
                                                                         height: int) -> None:
    m = measured[str(width)]["unfolded"]
    assert m["gpuColumns"][:2] == ["GPU", "Health"], m["gpuColumns"]
    assert m["faultyRows"] == ["3 (cuda3) FAIL GPU_ECC_UNCORRECTABLE", f"6 (cuda6) FAIL {WORST}"], m["faultyRows"]
    assert m["faultyColour"] not in ("", "rgba(0, 0, 0, 0)"), m


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}px" for w, _ in SIZES])
def test_matrices_stay_labelled_grids_and_keys_wrap_between_words(measured: dict[str, Any], width: int,
                                                                  height: int) -> None:
    m = measured[str(width)]["unfolded"]
    # the check's view and the node's Links fact: 8 labelled columns, every row on one line, within the page
    assert len(m["grids"]) == 2, m["grids"]
    for grid in m["grids"]:
        assert (grid["labels"], grid["rows"], grid["oneLine"]) == (8, 8, True), grid
        assert grid["width"] <= grid["room"], grid  # readable without scrolling, at 390 px too
    assert m["brokenWords"] == [], m["brokenWords"]  # no "Re/sol/ved", no "PYT/HON/PAT/H"
    assert m["paddedCommands"] == 0  # "(sudo nvidia-smi -r -i 2)", not "( sudo nvidia-smi -r -i 2 )"


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
    assert '<details class="group" open><summary>Needs attention (4)</summary>' in page
    assert '<details class="group"><summary>Passed (' in page
