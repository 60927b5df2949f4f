"""One answer to "which GPUs": with CUDA_VISIBLE_DEVICES=0,1 on a fake 8-GPU node, every check, fact and
fleet row speaks of the job's 2 GPUs (issue 14, item 2), in CUDA order; preflight merge reads the node
sections preflight itself wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, validate_report

pytestmark = pytest.mark.e2e


def run(out: Path, profile: str, visible: str | None, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(out), *args, "--", "-p",
                    "tests.fakes.nvml_plugin", f"--fake-nvml={profile}"], capture_output=True, text=True, env=env,
                   timeout=300)
    report: dict[str, Any] = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    return report


@pytest.fixture(scope="module")
def two_of_eight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("two-of-eight")
    report = run(out, "8x-h100-sxm", "1,0", "--model-params", "7B", "-m", "not distributed")
    report["_dir"] = str(out)
    return report


def test_the_job_is_two_gpus_in_cuda_order(two_of_eight: dict[str, Any]) -> None:
    job = two_of_eight["node"]["job"]
    assert job["ranks"] == 2 and job["gpus"] == [1, 0] and job["cuda_devices"] == 2
    gpus = two_of_eight["node"]["gpus"]["gpus"]
    assert [(g["cuda_index"], g["index"]) for g in gpus] == [(0, 1), (1, 0)]
    assert isinstance(gpus[0]["memory_total_bytes"], int)  # numbers with units, not display strings


def test_every_check_speaks_of_two(two_of_eight: dict[str, Any]) -> None:
    checks = {c["name"]: c for c in two_of_eight["checks"]}
    assert "the job will see 2 GPU(s)" in checks["test_gpu_count"]["summary"]
    fit = checks["test_memory_fit"]
    assert "on 2 x" in fit["summary"] and "ZeRO-3 fits at 65.80 GB per GPU" in fit["summary"], fit["summary"]
    per_rank = checks["test_cpu_and_ram_per_rank"]
    assert "for 2 ranks" in per_rank["summary"] or "2 ranks" in json.dumps(per_rank["evidence"]), per_rank
    per_gpu = sorted(c["name"] for c in two_of_eight["checks"] if c["name"].startswith("test_gpu_ecc["))
    assert per_gpu == ["test_gpu_ecc[gpu0]", "test_gpu_ecc[gpu1]"]


def test_the_bandwidth_expectation_is_for_the_jobs_two_gpus(tmp_path: Path) -> None:
    report = run(tmp_path, "8x-h100-sxm", "0,1", "-k", "allreduce_bandwidth", "--profile", "quick")  # the short sweep
    bandwidth = next(c for c in report["checks"] if c["name"] == "test_allreduce_bandwidth")
    assert "365 GB/s" in bandwidth["summary"] and "2x H100 SXM" in json.dumps(bandwidth["evidence"]), bandwidth


def test_merge_reads_the_node_sections_preflight_wrote(two_of_eight: dict[str, Any], tmp_path: Path) -> None:
    other = run(tmp_path / "pcie", "4x-a100-pcie-no-bridge", None, "-m", "not distributed")
    assert other["node"]["job"]["ranks"] == 4
    fleet = tmp_path / "fleet"
    first = str(Path(two_of_eight["_dir"]) / "preflight.json")
    merged = subprocess.run([sys.executable, "-m", "preflight", "merge", first,
                             str(tmp_path / "pcie" / "preflight.json"), "--out", str(fleet)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert merged.returncode in (0, 1), merged.stderr
    data = json.loads((fleet / "fleet.json").read_text())
    rows = {row["gpu_kind"]: row for row in data["nodes"]}
    assert set(rows) == {"Fake NVIDIA H100 80GB HBM3", "Fake NVIDIA A100 80GB PCIe"}, set(rows)
    assert rows["Fake NVIDIA H100 80GB HBM3"]["gpu_count"] == 2 and rows["Fake NVIDIA A100 80GB PCIe"]["gpu_count"] == 4
