"""The HTML report's formatting helpers: bytes, fixes with commands, readable keys, the headline."""

from __future__ import annotations

from preflight.report.document import NodeFacts
from preflight.report.html import format_bytes, format_metric, format_time, gpu_rows, headline, inline_code, label


def test_bytes_read_as_people_write_them() -> None:
    assert format_bytes(1_260_000_000_000) == "1.26 TB"
    assert format_bytes(85_520_809_984) == "85.5 GB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(8_388_608) == "8.39 MB"
    assert format_bytes("n/a") == "n/a"
    assert format_metric(50_000_000_000, "B") == "50 GB"
    assert format_metric(231.4, "GB/s") == "231.4 GB/s"


def test_backticks_become_code_after_escaping() -> None:
    assert inline_code("run `ss -ltnp 'sport = :29500'` now") == "run <code>ss -ltnp &#39;sport = :29500&#39;</code> now"
    hostile = inline_code("`<script>alert(1)</script>` and <b>bold</b>")
    assert "<script>" not in hostile and "<b>" not in hostile
    assert hostile.startswith("<code>&lt;script&gt;")
    assert inline_code("a lone ` stays") == "a lone ` stays"


def test_keys_become_titles_with_units() -> None:
    assert label("memory_total_bytes") == "Memory total"
    assert label("temperature_c") == "Temperature (°C)"
    assert label("memory_mib") == "Memory (MiB)"
    assert label("cpu_count") == "CPU count"
    assert label("CUDA_VISIBLE_DEVICES") == "CUDA_VISIBLE_DEVICES"
    assert label("planted<b>") == "planted<b>"  # not a name of ours: shown as it is (and escaped by the template)


def test_times_are_short() -> None:
    assert format_time("2026-12-01T11:03:08.327277+00:00") == "2026-12-01 11:03:08 UTC"
    assert format_time("yesterday") == "yesterday"


def test_headline_names_models_driver_cuda_torch_and_ranks() -> None:
    gpu = {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 85_899_345_920, "memory_used_bytes": 0,
           "pcie_current": {"generation": 4, "width": 16}, "pcie_max": {"generation": 4, "width": 16},
           "nvlinks_active": 12, "nvlinks_present": 12, "temperature_c": 30}
    other = {**gpu, "index": 1, "name": "NVIDIA A100-PCIE-40GB", "pcie_current": {"generation": 3, "width": 16},
             "nvlinks_present": 0}
    node = {"gpus": {"driver_version": "535.104.05", "cuda_driver_version": "12.2", "gpus": [gpu, gpu, other]},
            "torch": {"version": "2.13.0+cu126", "cuda": "12.6", "nccl": "2.27.3"}, "job": {"ranks": 3, "on_gpu": True}}
    assert headline(NodeFacts(node)) == ["2 × NVIDIA A100-SXM4-80GB", "1 × NVIDIA A100-PCIE-40GB", "driver 535.104.05",
                              "CUDA 12.2 (driver)", "torch 2.13.0+cu126 (CUDA 12.6, NCCL 2.27.3)", "3 ranks on GPUs"]
    assert headline(NodeFacts({})) == []
    rows = gpu_rows([gpu, other])
    assert rows[0]["Memory used / total"] == "0 B / 85.9 GB" and rows[0]["Temp."] == "30 °C"
    assert rows[0]["PCIe now (max)"] == "Gen4 x16" and rows[1]["PCIe now (max)"] == "Gen3 x16 (Gen4 x16)"
    assert rows[1]["NVLinks up"] == "none"
