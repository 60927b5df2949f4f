"""The static trap scan over small scripts: each trap, its corrected form, and false-positive cases.

Scripts in folders (``pkg_*/train.py``) import modules beside them; they are read the way the
plan checks read a script (``read_program``), so a helper's ``set_epoch`` or ``save_checkpoint`` counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from preflight.judge.script_traps import ScriptScan, judge_script_traps, scan_script
from preflight.judge.script_traps.program import Program
from preflight.judge.script_traps.ranks import RankValues
from preflight.outcome import Status
from preflight.probe.job_plan import read_program
from tests.conftest import TEST_DATA

SCRIPTS = TEST_DATA / "scripts"

EXPECTED: dict[str, list[tuple[int, str]]] = {
    # 1. save_checkpoint / save_state under a rank-0 condition
    "trap_save_checkpoint_rank0.py": [(10, "SCRIPT_SAVE_ON_ONE_RANK")],
    "fixed_save_checkpoint_rank0.py": [],
    "trap_accelerate_save_state_main.py": [(10, "SCRIPT_SAVE_ON_ONE_RANK")],
    "fixed_accelerate_save_state_main.py": [],
    "fp_accelerate_save_state_ddp.py": [(10, "SCRIPT_SAVE_STATE_ON_MAIN")],  # a PASS note
    "fp_accelerate_save_state_deepspeed_or_main.py": [],
    "trap_save_via_helper_master_process.py": [(17, "SCRIPT_SAVE_ON_ONE_RANK")],
    "fixed_save_via_helper_master_process.py": [],
    "pkg_save_helper/train.py": [(11, "SCRIPT_SAVE_ON_ONE_RANK")],
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
    "fp_set_epoch_in_method.py": [],
    "fp_eval_sampler_default_shuffle.py": [],
    "pkg_sampler_helper/train.py": [],
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
    "fp_collective_under_ddp_flag.py": [],
    # 6. every rank training on the same batches
    "trap_same_batches_every_rank.py": [(8, "SCRIPT_SAME_BATCHES_EVERY_RANK")],
    "fixed_same_batches_every_rank.py": [],
    "fp_same_batches_rank_seed.py": [],
    "fp_same_batches_dataset_shards_itself.py": [],
    # 7. a forward pass of a sharded model on one rank
    "trap_sharded_forward_on_rank0.py": [(21, "SCRIPT_SHARDED_FORWARD_ON_ONE_RANK")],
    "fixed_sharded_forward_on_rank0.py": [],
    "fp_forward_on_rank0_ddp.py": [],
    # 8. every rank writing the same checkpoint file
    "trap_same_file_every_rank.py": [(7, "SCRIPT_SAME_FILE_EVERY_RANK")],
    "fixed_same_file_every_rank.py": [],
    "fp_rank_in_checkpoint_name.py": [],
    # a whole seed-style DDP script: gloo fallback, sampler, torch.save on rank 0 of a DDP model
    "fp_seed_style_ddp.py": [],
}
PROBLEMS = sorted(n for n, found in EXPECTED.items() if found and not n.startswith("fp_"))


def scan(name: str) -> ScriptScan:
    source = read_program(str(SCRIPTS / name))
    assert source.text is not None
    return scan_script(source.text, name, source.neighbours)


def test_every_script_is_listed() -> None:
    on_disk = {p.name for p in SCRIPTS.glob("*.py")} - {"bad_syntax.py"}
    on_disk |= {f"{p.parent.name}/{p.name}" for p in SCRIPTS.glob("pkg_*/train.py")}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scan(name: str) -> None:
    result = scan(name)
    assert result.syntax_error is None
    assert [(t.line, t.code) for t in result.traps] == EXPECTED[name]


@pytest.mark.parametrize("name", PROBLEMS)
def test_each_trap_is_a_warn_naming_file_line_cost_and_certainty(name: str) -> None:
    verdict = judge_script_traps(scan(name))
    line, code = EXPECTED[name][0]
    assert verdict.status is Status.WARN and verdict.code == code
    assert f"{name}:{line}" in verdict.summary and "static analysis" in verdict.summary
    assert "costs:" in verdict.summary and ("(sure)" in verdict.summary or "(likely)" in verdict.summary)
    assert "static analysis" in (verdict.remediation or "")
    assert all(row[0] == "WARN" for row in verdict.views[0].data["rows"])


def test_a_helper_in_a_module_beside_the_script_is_followed() -> None:
    result = scan("pkg_save_helper/train.py")
    trap = result.traps[0]
    assert "in save_every_n() (checkpointing.py:3)" in trap.message and not trap.sure
    assert result.modules == ("checkpointing.py",)
    direct = scan_script((SCRIPTS / "trap_save_checkpoint_rank0.py").read_text(), "t.py").traps[0]
    assert direct.sure and "hangs" in direct.cost


def test_save_state_on_main_is_a_note_under_plain_ddp() -> None:
    verdict = judge_script_traps(scan("fp_accelerate_save_state_ddp.py"))
    assert verdict.status is Status.PASS and "harmless under plain DDP" in verdict.summary
    warned = judge_script_traps(scan("trap_accelerate_save_state_main.py"))
    assert warned.status is Status.WARN and "DeepSpeed or FSDP" in warned.summary
    assert "plain DDP it is harmless" in warned.summary


def test_corrected_form_passes() -> None:
    verdict = judge_script_traps(scan_script((SCRIPTS / "fixed_no_set_device.py").read_text(), "train.py"))
    assert verdict.status is Status.PASS and "static analysis" in verdict.summary
    helped = judge_script_traps(scan("pkg_sampler_helper/train.py"))
    assert helped.status is Status.PASS and "2 modules beside it" in helped.summary


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


def test_rank_conditions_are_those_that_differ_between_ranks() -> None:
    source = (
        "import os, torch.distributed as dist\n"
        "ddp = int(os.environ.get('RANK', -1)) != -1\n"
        "rank = int(os.environ['RANK'])\n"
        "master = rank == 0\n"
        "def is_rank_0():\n    return int(os.environ.get('RANK', '0')) == 0\n"
    )
    tree = ast.parse(source)
    values = RankValues(Program(tree, source, "t.py", {}))
    varies = {text: values.varies(ast.parse(text, mode="eval").body, None) for text in (
        "ddp", "master", "rank % 8 == 0", "is_rank_0()", "dist.get_world_size() > 1", "dist.is_initialized()",
        "args.local_rank != -1", "local_rank > -1", "accelerator.is_main_process", "fabric.global_rank == 0",
        "rank is None", "trainer.args.should_save")}
    assert varies == {"ddp": False, "master": True, "rank % 8 == 0": True, "is_rank_0()": True,
                      "dist.get_world_size() > 1": False, "dist.is_initialized()": False,
                      "args.local_rank != -1": False, "local_rank > -1": False,
                      "accelerator.is_main_process": True, "fabric.global_rank == 0": True, "rank is None": False,
                      "trainer.args.should_save": True}


def test_fan_out_under_many_rank_tests_is_bounded() -> None:
    """Each function calls the next three under three different rank tests: 3^12 paths, a bounded walk."""
    lines = ["import torch.distributed as dist", "rank = dist.get_rank()"]
    for i in range(40):
        lines += [f"def f{i}():", *(f"    if rank == {k}:\n        f{i + 1 + k}()" for k in range(3)),
                  "    dist.barrier()"]
    lines += ["def f40():\n    pass", "def f41():\n    pass", "def f42():\n    pass", "f0()"]
    result = scan_script("\n".join(lines) + "\n", "fan.py")
    assert result.syntax_error is None and result.traps
    assert all(t.code == "SCRIPT_COLLECTIVE_IN_RANK_BRANCH" for t in result.traps)
