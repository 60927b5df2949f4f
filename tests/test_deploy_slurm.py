"""The Slurm recipe against a real single-node Slurm started here: ``srun preflight --profile quick``
runs, and a failing check drains the node with the check's code as the reason."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.deploy_fakes import executable, fake_preflight, real_preflight
from tests.fleet_reports import ddp_check, make_report
from tests.slurm_cluster import SlurmCluster, missing_binaries

HEALTH_SCRIPT = REPO_ROOT / "deploy" / "slurm" / "preflight-health.sh"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(missing_binaries()), reason="Slurm/munge not installed (missing: "
                       f"{', '.join(missing_binaries())}); .ci/run installs slurmctld slurmd munge slurm-client"),
    pytest.mark.skipif(os.geteuid() != 0, reason="a test Slurm runs its daemons as root (SlurmUser=root)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        slurm.start()
        yield slurm
    finally:
        slurm.stop()


def wait_for(predicate: Callable[[], object], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(1)
    return False


def test_srun_runs_the_quick_profile_on_the_node(cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = cluster.run("srun", "-N1", "-n1", "-w", cluster.node, f"--chdir={tmp_path}", str(real_preflight(tmp_path)),
                         "--cpu", "--profile", "quick", "--report-dir", str(out), "--prometheus", str(out / "node.prom"),
                         timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + cluster.logs()
    report = json.loads((out / "preflight.json").read_text())
    assert report["verdict"] in ("READY", "DEGRADED") and report["run"]["options"]["profile"] == "quick"
    assert report["environment"]["SLURM_JOB_NODELIST"] == cluster.node and report["environment"]["SLURM_JOB_ID"]
    assert "preflight_verdict{" in (out / "node.prom").read_text()


def test_a_failing_check_drains_the_node_through_health_check_program(tmp_path_factory: pytest.TempPathFactory) -> None:
    """slurmd itself runs the recipe (HealthCheckProgram at start-up); ``--expect-gpus 8`` fails on a
    node with fewer GPUs (on this CPU machine: NVML is absent), and the node drains with that code."""
    root = tmp_path_factory.mktemp("slurm-hc")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    reports = root / "reports"
    config = root / "preflight-slurm.conf"
    hook = executable(bin_dir / "health-check", f"#!/bin/sh\nPREFLIGHT_CONFIG={config} exec {HEALTH_SCRIPT}\n")
    slurm = SlurmCluster(root / "cluster", node="pfdrain", extra_conf=f"HealthCheckProgram={hook}\nHealthCheckInterval=3600")
    config.write_text(f"""PREFLIGHT={real_preflight(bin_dir)}
PREFLIGHT_REPORT_DIR={reports}
PREFLIGHT_NODE=pfdrain
PREFLIGHT_ARGS="--expect-gpus 8 -k test_devices"
export SLURM_CONF={slurm.conf}
""")
    try:
        slurm.start(timeout_s=90)
        drained = wait_for(lambda: slurm.reason().startswith("preflight NOT READY: "), 120)
        log = (reports / "preflight-health.log").read_text() if (reports / "preflight-health.log").exists() else ""
        assert drained, f"reason {slurm.reason()!r}; state {slurm.state()}\n{log}\n{slurm.logs()}"
        report = json.loads((reports / "preflight.json").read_text())
        failed = [c for c in report["checks"] if c["status"] == "FAIL"]
        assert report["verdict"] == "NOT READY" and failed
        code = failed[0]["code"]
        assert slurm.reason().startswith(f"preflight NOT READY: {code}")
        assert slurm.state() in ("drained", "draining")
        shown = slurm.run("scontrol", "show", "node", "pfdrain").stdout
        assert f"Reason=preflight NOT READY: {code}" in shown
        assert f"exit 1: NOT READY: {code}" in log
    finally:
        slurm.stop()


def test_a_passing_run_resumes_only_a_node_preflight_drained(cluster: SlurmCluster, tmp_path: Path) -> None:
    env = {"PREFLIGHT": str(fake_preflight(tmp_path, make_report("n", [ddp_check()]), 0)),
           "PREFLIGHT_REPORT_DIR": str(tmp_path / "r"), "PREFLIGHT_NODE": cluster.node,
           "PREFLIGHT_CONFIG": str(tmp_path / "none")}
    try:
        cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=drain", "reason=broken fan (ticket 42)")
        result = cluster.run("sh", str(HEALTH_SCRIPT), env=env)
        assert result.returncode == 0
        assert cluster.reason() == "broken fan (ticket 42)"  # not preflight's drain: left alone

        cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=drain", "reason=preflight NOT READY: GPU_LOST")
        result = cluster.run("sh", str(HEALTH_SCRIPT), env=env)
        assert result.returncode == 0
        assert wait_for(lambda: cluster.reason() == "" and cluster.state() == "idle", 15), cluster.reason()
        assert "resumed: preflight passes again" in (tmp_path / "r" / "preflight-health.log").read_text()
    finally:
        cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=resume")


def test_a_run_that_could_not_decide_does_not_drain(cluster: SlurmCluster, tmp_path: Path) -> None:
    env = {"PREFLIGHT": str(fake_preflight(tmp_path, None, 2)), "PREFLIGHT_REPORT_DIR": str(tmp_path / "r"),
           "PREFLIGHT_NODE": cluster.node, "PREFLIGHT_CONFIG": str(tmp_path / "none")}
    result = cluster.run("sh", str(HEALTH_SCRIPT), env=env)
    assert result.returncode == 2
    assert cluster.reason() == "" and cluster.state() == "idle"
    assert "exit 2: UNKNOWN: preflight could not run (exit 2)" in (tmp_path / "r" / "preflight-health.log").read_text()
