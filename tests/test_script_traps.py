"""The static trap scan over small scripts: each trap, its corrected form, and false-positive cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.judge.script_traps import judge_script_traps, scan_script
from preflight.outcome import Status
from tests.conftest import TEST_DATA

SCRIPTS = TEST_DATA / "scripts"

EXPECTED: dict[str, list[tuple[int, str]]] = {
    # 1. save_checkpoint / save_state under a rank-0 condition
    "trap_save_checkpoint_rank0.py": [(10, "SCRIPT_SAVE_ON_ONE_RANK")],
    "fixed_save_checkpoint_rank0.py": [],
    "trap_accelerate_save_state_main.py": [(10, "SCRIPT_SAVE_ON_ONE_RANK")],
    "fixed_accelerate_save_state_main.py": [],
    "trap_save_via_helper_master_process.py": [(17, "SCRIPT_SAVE_ON_ONE_RANK")],
    "fixed_save_via_helper_master_process.py": [],
    # 2. NCCL without set_device / device_id, DDP without device_ids
    "trap_no_set_device.py": [(5, "SCRIPT_NO_SET_DEVICE"), (7, "SCRIPT_DDP_NO_DEVICE_IDS")],
    "fixed_no_set_device.py": [],
    "trap_set_device_constant.py": [(4, "SCRIPT_FIXED_DEVICE"), (6, "SCRIPT_DDP_FIXED_DEVICE")],
    "fp_device_id_in_init.py": [],
    "fp_gloo_cpu_no_set_device.py": [],
    # 3. DistributedSampler without set_epoch in the epoch loop
    "trap_sampler_no_set_epoch.py": [(4, "SCRIPT_SAMPLER_NO_SET_EPOCH")],
    "fixed_sampler_no_set_epoch.py": [],
    "fp_sampler_without_shuffle.py": [],
    # 4. FSDP state_dict saved with torch.save on rank 0
    "trap_fsdp2_rank0_save.py": [(10, "SCRIPT_FSDP_SHARD_SAVE")],
    "fixed_fsdp2_rank0_save_dcp.py": [],
    "fixed_fsdp2_rank0_save_full.py": [],
    "trap_fsdp1_full_state_on_rank0.py": [(11, "SCRIPT_FSDP_STATE_DICT_ON_ONE_RANK")],
    "fixed_fsdp1_full_state_on_rank0.py": [],
    "fp_fsdp_every_rank_saves_its_shard.py": [],
    # 5. a collective inside a rank-conditional branch
    "trap_all_reduce_on_rank0.py": [(6, "SCRIPT_COLLECTIVE_IN_RANK_BRANCH")],
    "fixed_all_reduce_on_rank0.py": [],
    "trap_barrier_after_early_return.py": [(8, "SCRIPT_COLLECTIVE_IN_RANK_BRANCH")],
    "fixed_barrier_after_early_return.py": [],
    "trap_rank_zero_only_decorator.py": [(7, "SCRIPT_COLLECTIVE_IN_RANK_BRANCH")],
    "fp_barrier_in_both_branches.py": [],
    "fp_barrier_rank0_first_pattern.py": [],
    "fp_conditions_every_rank_takes.py": [],
    # a whole seed-style DDP script: gloo fallback, sampler, torch.save on rank 0 of a DDP model
    "fp_seed_style_ddp.py": [],
}


def test_every_script_is_listed() -> None:
    on_disk = {p.name for p in SCRIPTS.glob("*.py")} - {"bad_syntax.py"}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scan(name: str) -> None:
    scan = scan_script((SCRIPTS / name).read_text(), name)
    assert scan.syntax_error is None
    assert [(t.line, t.code) for t in scan.traps] == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(n for n, found in EXPECTED.items() if found))
def test_each_trap_is_a_warn_naming_file_and_line_and_the_caveat(name: str) -> None:
    verdict = judge_script_traps(scan_script((SCRIPTS / name).read_text(), name))
    line, code = EXPECTED[name][0]
    assert verdict.status is Status.WARN and verdict.code == code
    assert f"{name}:{line}" in verdict.summary and "static analysis" in verdict.summary
    assert "static analysis" in (verdict.remediation or "")
    assert all(row[0] == "WARN" for row in verdict.views[0].data["rows"])


def test_corrected_form_passes() -> None:
    verdict = judge_script_traps(scan_script((SCRIPTS / "fixed_no_set_device.py").read_text(), "train.py"))
    assert verdict.status is Status.PASS and "static analysis" in verdict.summary


def test_syntax_error_is_a_fail_with_the_line(tmp_path: Path) -> None:
    verdict = judge_script_traps(scan_script((SCRIPTS / "bad_syntax.py").read_text(), "bad_syntax.py"))
    assert verdict.status is Status.FAIL and verdict.code == "SCRIPT_SYNTAX_ERROR" and "line 3" in verdict.summary


def test_resume_detection() -> None:
    assert scan_script((SCRIPTS / "fp_seed_style_ddp.py").read_text(), "t.py").resumes is True
    assert scan_script((SCRIPTS / "trap_save_checkpoint_rank0.py").read_text(), "t.py").resumes is False
    hf = "trainer.train(resume_from_checkpoint=True)\n"
    assert scan_script(hf, "t.py").resumes is True
    ds = "engine.load_checkpoint('ckpt')\n"
    assert scan_script(ds, "t.py").resumes is True
