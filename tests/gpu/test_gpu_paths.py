"""Every GPU path of preflight, for real, checked against the node itself (skipped without an NVIDIA GPU).

Run on a GPU machine (``benchmarks/gpu_check.sh`` does it): each test runs the real ``preflight`` in a
child process and compares what it reports with ``nvidia-smi``, ``nvcc`` and torch asked directly.
Nothing here is faked; on a machine without a GPU every test skips, saying why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SMI = shutil.which("nvidia-smi")


def _gpu_count() -> int:
    if SMI is None:
        return 0
    listed = subprocess.run([SMI, "-L"], capture_output=True, text=True, timeout=60)
    return len([line for line in listed.stdout.splitlines() if line.startswith("GPU ")]) if listed.returncode == 0 else 0


GPUS = _gpu_count()
pytestmark = pytest.mark.skipif(GPUS == 0, reason="no NVIDIA GPU here (nvidia-smi -L lists none): these tests run "
                                "every GPU path for real and need one")
two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 or more GPUs (peer-to-peer and the NCCL sweep)")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "NCCL_P2P_DISABLE")}
    env.update(extra or {})
    return env


def preflight(out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 400) -> dict[str, Any]:
    """Run ``preflight`` and return its report (checks by name under ``_checks``)."""
    result = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(out), *args],
                            capture_output=True, text=True, env=_env(env), timeout=timeout)
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "preflight.json").read_text())
    report["_checks"] = {c["id"].split("::")[-1]: c for c in report["checks"]}
    return report


def smi_query(*fields: str) -> list[list[str]]:
    """``nvidia-smi --query-gpu=...`` rows (no units)."""
    assert SMI is not None
    out = subprocess.run([SMI, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return preflight(tmp_path_factory.mktemp("full"), "--strategy", "all")


def test_nvml_facts_match_nvidia_smi(full_run: dict[str, Any]) -> None:
    gpus = full_run["node"]["gpus"]["gpus"]
    rows = smi_query("index", "name", "uuid", "pci.bus_id", "memory.total", "driver_version")
    assert len(gpus) == len(rows) == GPUS
    for gpu, (index, name, uuid, bus, total, _driver) in zip(gpus, rows, strict=True):
        assert gpu["index"] == int(index) and gpu["name"] == name and gpu["uuid"] == uuid
        assert gpu["pci_bus_id"].upper() == bus.upper()
        assert abs(int(gpu["memory_total_mib"]) - int(total)) <= 1
    assert full_run["node"]["gpus"]["driver_version"] == rows[0][5]


def test_the_jobs_torch_sees_every_gpu_and_the_job_uses_them(full_run: dict[str, Any]) -> None:
    torch_facts = full_run["node"]["torch"]
    import torch

    assert torch_facts["version"] == torch.__version__ and torch_facts["cuda"] == torch.version.cuda
    assert torch_facts["device_count"] == GPUS == torch.cuda.device_count()
    job = full_run["node"]["job"]
    assert job["on_gpu"] and job["ranks"] == GPUS and sorted(job["gpus"]) == list(range(GPUS))


def test_every_per_gpu_check_judged_a_real_gpu(full_run: dict[str, Any]) -> None:
    per_gpu = [name for name in full_run["_checks"] if re.search(r"\[gpu\d+\]$", name)]
    assert len({name.split("[")[1] for name in per_gpu}) == GPUS
    for name in per_gpu:
        check = full_run["_checks"][name]
        assert check["status"] != "ERROR", check


def test_ddp_fsdp_and_zero_train_on_nccl(full_run: dict[str, Any]) -> None:
    ddp = full_run["_checks"]["test_ddp_step"]
    assert ddp["status"] == "PASS" and "(nccl, distinct GPUs)" in ddp["summary"], ddp
    fsdp = full_run["_checks"]["test_strategy_step[fsdp]"]
    assert fsdp["status"] in ("PASS", "WARN"), fsdp
    for stage in ("zero1", "zero2", "zero3"):
        zero = full_run["_checks"][f"test_strategy_step[{stage}]"]
        assert zero["status"] in ("PASS", "WARN", "SKIP"), zero
        if zero["status"] == "SKIP":
            assert "DeepSpeed is not installed" in zero["summary"], zero


@two_gpus
def test_the_sweep_runs_with_and_without_p2p(full_run: dict[str, Any]) -> None:
    bandwidth = full_run["_checks"]["test_allreduce_bandwidth"]
    assert bandwidth["status"] in ("PASS", "WARN"), bandwidth
    assert "(nccl)" in bandwidth["summary"]
    p2p = full_run["_checks"]["test_nccl_p2p"]
    assert p2p["status"] in ("PASS", "WARN"), p2p
    metrics = {m["name"]: m["value"] for m in p2p["metrics"]}
    assert metrics.get("p2p_on_busbw_peak", 0) > 0 and metrics.get("p2p_off_busbw_peak", 0) > 0


@two_gpus
def test_p2p_copies_every_pair(full_run: dict[str, Any]) -> None:
    copies = full_run["_checks"]["test_p2p_copies"]
    assert copies["status"] in ("PASS", "WARN"), copies
    assert f"{GPUS * (GPUS - 1)} directed copies" in copies["summary"] or copies["status"] == "WARN", copies


def test_the_pcie_link_is_judged_under_load(full_run: dict[str, Any]) -> None:
    for name, check in full_run["_checks"].items():
        if name.startswith("test_gpu_pcie_link["):
            assert check["status"] != "ERROR", check
            assert "under load" in check["summary"] or check["status"] == "SKIP", check


def test_the_toolkit_rule_reads_the_real_nvcc(full_run: dict[str, Any]) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    release = re.search(r"release (\d+\.\d+)", text)
    assert release is not None
    found = full_run["node"]["toolkit"]["nvcc_on_path"][0]
    assert found["release"] == release.group(1), found


def test_no_gpu_memory_is_held_afterwards(full_run: dict[str, Any]) -> None:
    assert SMI is not None
    apps = subprocess.run([SMI, "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=60).stdout
    assert "preflight" not in apps and "python" not in apps, apps


@two_gpus
def test_one_visible_gpu_makes_a_one_gpu_job(tmp_path: Path) -> None:
    report = preflight(tmp_path, "-m", "not distributed", env={"CUDA_VISIBLE_DEVICES": "1"})
    job = report["node"]["job"]
    assert job["ranks"] == 1 and job["gpus"] == [1]
    count = report["_checks"]["test_gpu_count"]
    assert "the job will see 1 GPU" in count["summary"], count
