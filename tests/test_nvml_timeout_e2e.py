"""Issue 14 item 5 and issue 24 item 5: a hung NVML never hangs the run, and every later driver call gets a
short deadline. ``preflight`` in a child process, over a fake NVML whose GPU 1 blocks every call
(NVIDIA/open-gpu-kernel-modules#1333: "all subsequent NVML calls hang") and an ``nvidia-smi`` that hangs on
the same driver (leptonai/gpud#117: nvidia-smi stuck after an Xid)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from preflight.locations import checks_dir
from tests.conftest import REPO_ROOT, validate_report
from tests.fakes.nvml_profiles import ROWS
from tests.test_cli import preflight

pytestmark = pytest.mark.e2e

NVML_TIMEOUT_S = 4  # settable (--nvml-timeout): the hung GPU blocks for ever, so 4 s tests what 10 s did
RUN_TIMEOUT_S = 120
HUNG_SMI = "#!/bin/sh\nsleep 600\n"


def test_a_hung_nvml_is_reported_once_and_every_other_check_still_reports(tmp_path: Path) -> None:
    if checks_dir() != (REPO_ROOT / "checks").resolve():
        pytest.skip(f"preflight.checks resolves to {checks_dir()}, another checkout")
    out = tmp_path / "reports"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(HUNG_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    started = time.monotonic()
    result = preflight(
        "--report-dir", str(out), "--nvml-timeout", str(NVML_TIMEOUT_S), "--timeout", str(RUN_TIMEOUT_S),
        "-m", "not distributed", "--", "-p", "tests.fakes.nvml_plugin", f"--fake-nvml={ROWS['hung-driver'].profile}",
        "--fake-torch-count=2", cwd=tmp_path, timeout=RUN_TIMEOUT_S + 60,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    report = json.loads((out / "preflight.json").read_text())
    validate_report(report)
    checks = report["checks"]
    timed_out = [c for c in checks if c.get("code") == "NVML_TIMEOUT"]
    assert [c["name"] for c in timed_out] == ["test_nvml"]
    assert timed_out[0]["status"] == "FAIL" and f"within {NVML_TIMEOUT_S} s" in timed_out[0]["summary"]
    assert report["node"]["gpus"]["error"].startswith("NVML_TIMEOUT")
    assert report["verdict"] == "NOT READY"
    assert len(checks) > 20 and all(c["status"] in ("PASS", "WARN", "FAIL", "SKIP", "ERROR") for c in checks)
    gpu_checks = [c for c in checks if c["name"].endswith("[nogpu]")]
    assert gpu_checks and all(c["status"] == "SKIP" and "NVML did not answer" in c["summary"] for c in gpu_checks)
    assert any(c["status"] == "PASS" for c in checks)  # the host checks ran on
    # the NVML child was killed at its deadline (plus start-up), and the whole run stayed bounded
    assert NVML_TIMEOUT_S <= report["node"]["gpus"]["nvml_walk_s"] < NVML_TIMEOUT_S + 5
    # nvidia-smi topo -m waits on the same driver: 5 s after NVML hung (Node.AFTER_HUNG_DRIVER_S), not 120
    assert report["node"]["topology"]["problem"] == "nvidia-smi: no answer within 5 s (killed)"
    # issue 24: a verdict within ~30 s (10 s of NVML, 5 s of nvidia-smi, the checks); noisy on a loaded machine
    assert elapsed < 60, f"the run took {elapsed:.0f} s"
