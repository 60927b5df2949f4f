"""The job-plan checks end to end: ``preflight --ds-config/--launch/--script`` on a fake 8-GPU node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight.job_plan import PlanNode, rehearsal_plan_verdicts
from preflight.judge.cuda_runtime import GpuCapability
from preflight.judge.ds_config import HostMemory
from preflight.outcome import Status
from tests.conftest import REPO_ROOT, TEST_DATA, corpus_dir, validate_report

pytestmark = pytest.mark.e2e

SEED = TEST_DATA / "ds_config" / "seed_zero2.json"
SCRIPTS = TEST_DATA / "scripts"
CORPUS = corpus_dir()  # the real files (never committed: third-party code); the canonical runs skip without them
CANONICAL = {
    # the launch line of each, as its documentation gives it, run from the folder it names (tests/data/corpus)
    "ddp-tutorial": ("pytorch__examples/distributed/ddp-tutorial-series",
                     "torchrun --standalone --nproc_per_node=4 multigpu_torchrun.py 50 10"),
    "nanoGPT": ("karpathy__nanoGPT", "torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py"),
    "build-nanogpt": ("karpathy__build-nanogpt", "torchrun --standalone --nproc_per_node=8 train_gpt2.py"),
    "cifar-deepspeed": ("microsoft__DeepSpeedExamples/training/cifar",
                        "deepspeed --bind_cores_to_rank cifar10_deepspeed.py --deepspeed"),
}


def fake_node(profile: str = "8x-h100-sxm") -> list[str]:
    """The pytest arguments that give the run a fake GPU node (the one place to switch fakes)."""
    return ["-p", "tests.fakes.nvml_plugin", f"--fake-nvml={profile}"]


def run(tmp_path: Path, *args: str, profile: str | None = "8x-h100-sxm",
        env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """``preflight -k job_plan ARGS -- <fake node>``; the completed process and the JSON report."""
    out = tmp_path / "reports"
    full_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    extra = ["--", *fake_node(profile)] if profile else []
    result = subprocess.run([sys.executable, "-m", "preflight", "-k", "job_plan or memory_fit", "--report-dir",
                             str(out), *args, *extra], capture_output=True, text=True, env=full_env, cwd=REPO_ROOT,
                            timeout=180)
    report_file = out / "preflight.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else None
    if report is not None:
        validate_report(report)
    return result, report


def plan_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def canonical_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict[str, Any] | None, str]]:
    """The four canonical jobs' plan checks, one preflight run each, started together."""
    if not CORPUS.is_dir():
        pytest.skip(f"the plan corpus (the canonical scripts) is not at {CORPUS} (PREFLIGHT_CORPUS)")
    started = {}
    for name, (folder, line) in CANONICAL.items():
        out = tmp_path_factory.mktemp(name)
        argv = [sys.executable, "-m", "preflight", "-k", "job_plan", "--report-dir", str(out), "--launch", line,
                "--", *fake_node()]
        started[name] = (out, subprocess.Popen(argv, cwd=CORPUS / folder, env=plan_env(), text=True,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    results = {}
    for name, (out, proc) in started.items():
        output, _ = proc.communicate(timeout=240)
        report_file = out / "preflight.json"
        report = json.loads(report_file.read_text()) if report_file.exists() else None
        if report is not None:
            validate_report(report)
        results[name] = (proc.returncode, report, output)
    return results


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_canonical_jobs_are_ready_on_the_plan_checks(
        name: str, canonical_runs: dict[str, tuple[int, dict[str, Any] | None, str]]) -> None:
    returncode, report, output = canonical_runs[name]
    assert returncode == 0 and report is not None and report["verdict"] == "READY", output
    found = checks(report)
    assert found["test_launch_command"]["status"] == "PASS", found["test_launch_command"]["summary"]
    assert found["test_script_traps"]["status"] == "PASS", found["test_script_traps"]["summary"]
    assert all(c["status"] in ("PASS", "SKIP") for c in found.values())


def checks(report: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    assert report is not None
    return {c["name"]: c for c in report["checks"]}


def test_seed_config_passes_on_8_gpus_and_names_the_effective_batch(tmp_path: Path) -> None:
    result, report = run(tmp_path, "--ds-config", str(SEED))
    assert result.returncode == 0, result.stdout + result.stderr
    found = checks(report)
    batch = found["test_ds_config_batch"]
    assert batch["status"] == "PASS" and "effective batch 128" in batch["summary"]
    for name in ("test_ds_config_precision", "test_ds_config_zero", "test_ds_config_keys"):
        assert found[name]["status"] == "PASS", found[name]["summary"]
    assert found["test_launch_command"]["status"] == "SKIP" and found["test_script_traps"]["status"] == "SKIP"
    assert report is not None and report["verdict"] == "READY"


def test_two_visible_gpus_compute_a_smaller_batch_and_a_fixed_one_fails(tmp_path: Path) -> None:
    result, report = run(tmp_path, "--ds-config", str(SEED), env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert result.returncode == 0, result.stderr
    assert "effective batch 32" in checks(report)["test_ds_config_batch"]["summary"]
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps({**json.loads(SEED.read_text()), "train_batch_size": 128}))
    result, report = run(tmp_path, "--ds-config", str(fixed), env={"CUDA_VISIBLE_DEVICES": "0,1"})
    batch = checks(report)["test_ds_config_batch"]
    assert result.returncode == 1 and batch["status"] == "FAIL" and "128 != 4 * 4 * 2" in batch["summary"]


def test_bf16_on_v100_fails(tmp_path: Path) -> None:
    _, report = run(tmp_path, "--ds-config", str(SEED), profile="8x-v100-sxm2")
    precision = checks(report)["test_ds_config_precision"]
    assert precision["status"] == "FAIL" and precision["code"] == "DS_BF16_UNSUPPORTED"


def test_launch_and_its_script_are_judged_together(tmp_path: Path) -> None:
    script = SCRIPTS / "trap_save_checkpoint_rank0.py"
    launch = f"torchrun --standalone --nproc-per-node=4 --max-restarts 2 -t 3 {script} --deepspeed_config {SEED}"
    result, report = run(tmp_path, "--launch", launch, "--model-params", "7B")
    found = checks(report)
    assert result.returncode == 0, result.stderr
    assert "effective batch 64" in found["test_ds_config_batch"]["summary"]  # 4 ranks from the launch command
    assert found["test_launch_command"]["code"] == "LAUNCH_RESTARTS_WITHOUT_RESUME"
    traps = found["test_script_traps"]
    assert traps["status"] == "WARN" and traps["code"] == "SCRIPT_SAVE_ON_ONE_RANK"
    assert f"{script}:10" in traps["summary"] and "static analysis" in traps["summary"]
    assert found["test_ds_config_zero"]["status"] == "PASS" and "4 ranks" in found["test_ds_config_zero"]["summary"]


def test_a_missing_module_fails_and_a_missing_config_is_reported_once(tmp_path: Path) -> None:
    # huggingface/transformers docs/source/en/deepspeed.md gives `python -m torch.run ...` (no such module)
    launch = ("python -m torch.run --nproc_per_node=8 --master_port=9901 your_program.py --deepspeed "
              "/nonexistent/ds_config.json")
    result, report = run(tmp_path, "--launch", launch)
    found = checks(report)
    assert result.returncode == 1
    assert found["test_launch_command"]["code"] == "LAUNCH_MODULE_MISSING"
    assert "No module named torch.run" in found["test_launch_command"]["summary"]
    failed = [name for name, c in found.items() if c.get("code") == "DS_CONFIG_UNREADABLE"]
    assert failed == ["test_ds_config_batch"]
    for name in ("test_ds_config_precision", "test_ds_config_zero", "test_ds_config_keys"):
        assert found[name]["status"] == "SKIP" and "DS_CONFIG_UNREADABLE" in found[name]["summary"]


def test_lora_options_reach_the_memory_fit(tmp_path: Path) -> None:
    result, report = run(tmp_path, "--model-params", "70B", "--lora-rank", "16", "--hidden-size", "8192",
                         "--num-layers", "80", "--base-bits", "4")
    fit = checks(report)["test_memory_fit"]
    assert result.returncode == 0 and fit["status"] == "PASS" and "4-bit base" in fit["summary"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ds-config", "/nonexistent/ds.json"], "does not exist"),
        (["--ds-config", str(TEST_DATA / "scripts" / "README.md")], "is not valid JSON"),
        (["--launch", "torchrun 'train.py"], "does not parse as a shell line"),
        (["--launch", "accelerate launch train.py"], "preflight reads torchrun"),
        (["--script", "/nonexistent/train.py"], "does not exist"),
        (["--lora-rank", "8"], "give --model-params too"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result, _ = run(tmp_path, *args, profile=None)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_rehearse_hook_finds_the_config_in_the_script_arguments() -> None:
    node = PlanNode(node_gpus=8, visible_gpus=8, visible_var=None,
                    capabilities=tuple(GpuCapability(i, "H100", (9, 0)) for i in range(8)), memory=(), ranks=8,
                    ranks_how="8 visible GPUs", cpus=64, host=HostMemory(None, None, None),
                    deepspeed_version="0.19.8")
    script = str(SCRIPTS / "fixed_save_checkpoint_rank0.py")
    verdicts = {v.name: v.verdict for v in rehearsal_plan_verdicts(
        script, ["--epochs", "1", "--deepspeed_config", str(SEED)], node=node, ranks=2)}
    assert set(verdicts) == {"script_traps", "ds_config_batch", "ds_config_precision", "ds_config_zero",
                             "ds_config_keys"}
    assert verdicts["script_traps"].status is Status.PASS
    assert "effective batch 32" in verdicts["ds_config_batch"].summary
    missing = {v.name: v.verdict for v in rehearsal_plan_verdicts(script, ["--deepspeed", "nope.json"], node=node,
                                                                  ranks=2)}
    assert missing["ds_config"].code == "DS_CONFIG_UNREADABLE"
    gone = rehearsal_plan_verdicts("/nonexistent/train.py", [], node=node, ranks=1)
    assert [v.verdict.code for v in gone] == ["SCRIPT_UNREADABLE"]
