"""The DeepSpeed config: parser, batch arithmetic (as DeepSpeed 0.19.8), precision, ZeRO fit, keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.judge.cuda_runtime import GpuCapability
from preflight.judge.ds_config import (
    HostMemory,
    JobWorld,
    PathSpace,
    deepspeed_batch,
    judge_ds_batch,
    judge_ds_keys,
    judge_ds_precision,
    judge_ds_zero,
    offload_need,
    zero_plan,
)
from preflight.judge.memory_fit import FitPlan, plan_memory_fit
from preflight.judge.sizing import LoraSplit, lora_split
from preflight.outcome import Status, Verdict
from preflight.parse.ds_config import MISSING, DsConfig, DsConfigError, parse_ds_config, read_ds_config
from preflight.parse.ds_config_keys import known_keys_from, load_known_keys
from preflight.probe.gpu_memory import GpuMemory
from tests.conftest import REPO_ROOT, TEST_DATA

CONFIGS = TEST_DATA / "ds_config"
GB = 10**9
H100 = [GpuCapability(i, "NVIDIA H100 80GB HBM3", (9, 0)) for i in range(8)]
V100 = [GpuCapability(i, "Tesla V100-SXM2-32GB", (7, 0)) for i in range(8)]
EIGHT = JobWorld(8, "8 visible GPUs")
ROOMY_HOST = HostMemory(total_bytes=2000 * GB, available_bytes=1900 * GB, memlock_bytes=None)


def config(data: dict[str, object]) -> DsConfig:
    return parse_ds_config(json.dumps(data), "ds.json")


def codes(verdict: Verdict) -> list[str]:
    return [f["code"] for f in verdict.details["findings"]]


def fit(params: int, gpus: int = 8, memory: int = 80 * GB, *, largest_layer_params: int | None = None,
        lora: LoraSplit | None = None) -> FitPlan:
    return plan_memory_fit(params=params, gpus=[GpuMemory(i, "GPU", memory) for i in range(gpus)],
                           largest_layer_params=largest_layer_params, lora=lora)


# --- parser -----------------------------------------------------------------------------------


def test_key_paths_and_auto_values_are_kept() -> None:
    parsed = read_ds_config(CONFIGS / "hf_auto_zero3.json")
    assert parsed.get("zero_optimization.stage") == 3
    assert parsed.is_auto("zero_optimization.reduce_bucket_size")
    assert parsed.get("zero_optimization.nope") is MISSING and not parsed.has("nope")
    assert "optimizer.params.lr" in parsed.auto_paths() and "train_batch_size" in parsed.auto_paths()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1,}', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"zero_optimization": {"stage": 2, "stage": 3}}', "appears twice"),
        ("// comment\n{}", "not valid JSON"),
    ],
)
def test_bad_config_text_is_one_line(text: str, message: str) -> None:
    with pytest.raises(DsConfigError, match=message) as caught:
        parse_ds_config(text, "ds.json")
    assert "\n" not in str(caught.value)


def test_missing_directory_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(DsConfigError, match="does not exist"):
        read_ds_config(tmp_path / "nope.json")
    with pytest.raises(DsConfigError, match="is a directory"):
        read_ds_config(tmp_path)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DsConfigError, match="not UTF-8"):
        read_ds_config(tmp_path / "bin.json")


# --- batch arithmetic: every case checked against real DeepSpeed 0.19.8 (see test at the end) ---

DS_CASES: list[tuple[tuple[int | None, int | None, int | None, int], tuple[int | None, int | None, int | None,
                                                                            str | None]]] = [
    # (train, micro, accumulation, world) -> (train, micro, accumulation, error start)
    ((None, 4, 4, 1), (16, 4, 4, None)),
    ((None, 4, 4, 8), (128, 4, 4, None)),
    ((10, 4, 4, 1), (10, 4, 4, "train_batch_size is not equal")),
    ((10, 4, None, 1), (10, 4, 2, "train_batch_size is not equal")),
    ((3, None, None, 1), (3, 3, 1, None)),
    ((None, None, 3, 1), (None, None, 3, "Either train_batch_size")),
    ((None, 0, 4, 1), (0, 0, 4, "Train batch size: 0")),
    ((2, 4, None, 1), (2, 4, 0, "Gradient accumulation steps: 0")),
    ((128, 4, None, 6), (128, 4, 5, "train_batch_size is not equal")),
    ((128, None, 4, 8), (128, 4, 4, None)),
    ((None, 4, None, 8), (32, 4, 1, None)),
]


@pytest.mark.parametrize(("given", "expected"), DS_CASES)
def test_batch_arithmetic_is_deepspeeds(given: tuple[int | None, int | None, int | None, int],
                                        expected: tuple[int | None, int | None, int | None, str | None]) -> None:
    result = deepspeed_batch(*given)
    assert (result.train_batch, result.micro_batch, result.accumulation) == expected[:3]
    assert (result.error or "").startswith(expected[3] or "") and (result.error is None) == (expected[3] is None)


def test_seed_config_on_8_gpus_names_the_effective_batch() -> None:
    verdict = judge_ds_batch(read_ds_config(CONFIGS / "seed_zero2.json"), EIGHT)
    assert verdict.status is Status.PASS
    assert "effective batch 128 = 4 per GPU x 4 accumulation steps x 8 ranks" in verdict.summary
    assert {m.name: m.value for m in verdict.metrics}["effective_batch"] == 128


def test_fewer_visible_gpus_change_the_computed_batch() -> None:
    verdict = judge_ds_batch(read_ds_config(CONFIGS / "seed_zero2.json"), JobWorld(2, "2 visible GPUs"))
    assert verdict.status is Status.PASS and "effective batch 32" in verdict.summary


def test_fixed_triple_is_refused_on_another_rank_count_and_the_fix_names_the_value() -> None:
    verdict = judge_ds_batch(read_ds_config(CONFIGS / "batch_mismatch.json"), EIGHT)
    assert verdict.status is Status.FAIL and verdict.code == "DS_BATCH_REFUSED"
    assert "64 != 4 * 4 * 8" in verdict.summary
    assert "Set train_batch_size to 128" in (verdict.remediation or "")
    assert "works on 4 ranks" in (verdict.remediation or "")
    rows = {row[0]: row[4] for row in verdict.details["what_if"]["rows"]}
    assert rows == {1: "refuses", 2: "refuses", 4: "accepts", 8: "refuses"}


def test_train_batch_with_micro_rounds_down_the_accumulation() -> None:
    verdict = judge_ds_batch(config({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 4}),
                             JobWorld(6, "--nproc"))
    assert verdict.status is Status.FAIL and "128 != 4 * 5 * 6" in verdict.summary
    assert "multiple of train_micro_batch_size_per_gpu x 6 ranks = 24" in (verdict.remediation or "")


def test_nothing_given_and_bad_values() -> None:
    assert judge_ds_batch(config({"gradient_accumulation_steps": 2}), EIGHT).code == "DS_BATCH_REFUSED"
    assert judge_ds_batch(config({"train_micro_batch_size_per_gpu": "4"}), EIGHT).code == "DS_BATCH_NOT_A_NUMBER"
    assert judge_ds_batch(config({"train_micro_batch_size_per_gpu": 2.5}), EIGHT).code == "DS_BATCH_NOT_WHOLE"
    assert judge_ds_batch(config({"train_micro_batch_size_per_gpu": 4.0}), EIGHT).status is Status.PASS


def test_auto_batch_is_the_trainers_and_says_so() -> None:
    verdict = judge_ds_batch(read_ds_config(CONFIGS / "hf_auto_zero3.json"), EIGHT)
    assert verdict.status is Status.PASS and "Hugging Face Trainer" in verdict.summary
    partial = judge_ds_batch(config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
                                     "gradient_accumulation_steps": 8}), EIGHT)
    assert partial.status is Status.PASS and "effective batch 128" in partial.summary
    fixed = judge_ds_batch(config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto"}), EIGHT)
    assert fixed.status is Status.PASS and "DS_BATCH_FIXED" in codes(fixed)


def test_sequence_parallel_divides_the_world() -> None:
    split = judge_ds_batch(config({"train_micro_batch_size_per_gpu": 4, "sequence_parallel_size": 2}), EIGHT)
    assert split.status is Status.PASS and "effective batch 16" in split.summary
    uneven = judge_ds_batch(config({"train_micro_batch_size_per_gpu": 4, "sequence_parallel_size": 3}), EIGHT)
    assert uneven.code == "DS_SEQUENCE_PARALLEL_SPLIT"
    mesh = judge_ds_batch(config({"train_micro_batch_size_per_gpu": 4, "sequence_parallel_size": 2,
                                  "data_parallel_size": 2}), EIGHT)
    assert mesh.code == "DS_MESH_MISMATCH"


# --- precision ----------------------------------------------------------------------------------


def test_bf16_on_h100_passes_and_on_v100_fails() -> None:
    seed = read_ds_config(CONFIGS / "seed_zero2.json")
    assert judge_ds_precision(seed, H100).status is Status.PASS
    on_v100 = judge_ds_precision(seed, V100)
    assert on_v100.status is Status.FAIL and on_v100.code == "DS_BF16_UNSUPPORTED"
    assert "Tesla V100-SXM2-32GB, 7.0" in on_v100.summary and "fp16" in (on_v100.remediation or "")


def test_fp16_and_bf16_both_on_is_deepspeeds_assertion() -> None:
    both = judge_ds_precision(config({"bf16": {"enabled": True}, "fp16": {"enabled": True}}), H100)
    assert both.status is Status.FAIL and both.code == "DS_PRECISION_BOTH"


def test_auto_precision_on_v100_warns_and_legacy_bfloat16_counts() -> None:
    auto = judge_ds_precision(config({"bf16": {"enabled": "auto"}}), V100)
    assert auto.status is Status.WARN and auto.code == "DS_BF16_UNSUPPORTED"
    legacy = judge_ds_precision(config({"bfloat16": {"enabled": True}}), V100)
    assert legacy.status is Status.FAIL and "bfloat16.enabled" in legacy.summary
    autocast = judge_ds_precision(config({"torch_autocast": {"enabled": True, "dtype": "bfloat16"}}), V100)
    assert autocast.status is Status.FAIL


def test_precision_without_gpus_judges_what_it_can() -> None:
    assert "no GPU visible" in judge_ds_precision(config({"bf16": {"enabled": True}}), ()).summary
    assert "unknown" in judge_ds_precision(config({"fp16": {"enabled": True}}), None).summary


# --- ZeRO and offload ----------------------------------------------------------------------------


def test_seed_zero2_fits_7b_on_8x80gb() -> None:
    verdict = judge_ds_zero(read_ds_config(CONFIGS / "seed_zero2.json"), fit=fit(7 * GB), ranks=8, host=ROOMY_HOST)
    assert verdict.status is Status.PASS and "ZeRO-2" in verdict.summary and "28.00 GB" in verdict.summary
    assert "DS_ZERO_LIGHTER_FITS" in codes(verdict)


def test_stage_that_does_not_fit_names_one_that_does() -> None:
    verdict = judge_ds_zero(config({"zero_optimization": {"stage": 1}}), fit=fit(13 * GB), ranks=8, host=ROOMY_HOST)
    assert verdict.status is Status.FAIL and verdict.code == "DS_ZERO_DOES_NOT_FIT"
    assert '"stage": 2' in (verdict.remediation or "")


def test_no_model_size_still_judges_the_structure() -> None:
    verdict = judge_ds_zero(config({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}),
                            fit=None, ranks=8, host=ROOMY_HOST)
    assert verdict.status is Status.WARN and verdict.code == "DS_OFFLOAD_IGNORED"
    assert "memory fit was not checked" in json.dumps(verdict.details) or "offload_param" in verdict.summary


@pytest.mark.parametrize(("stage", "code"), [(4, "DS_ZERO_STAGE_INVALID"), ("auto", "DS_AUTO"),
                                             (True, "DS_ZERO_STAGE_INVALID")])
def test_odd_stages(stage: object, code: str) -> None:
    assert code in codes(judge_ds_zero(config({"zero_optimization": {"stage": stage}}), fit=None, ranks=8,
                                       host=ROOMY_HOST))


def test_deprecated_boolean_zero_is_stage_1() -> None:
    plan = zero_plan(config({"zero_optimization": True}))
    assert plan is not None and plan.stage == 1


def test_zero2_cpu_offload_follows_deepspeeds_estimator() -> None:
    cfg = config({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    plan = zero_plan(cfg)
    assert plan is not None
    need = offload_need(plan, fit(7 * GB), ranks=8)
    assert need is not None
    assert need.gpu_bytes == 2 * 7 * GB  # estimate_zero2_model_states_mem_needs: gpu_mem = 2 * total_params
    assert need.host_bytes == int(7 * GB * max(4 * 8, 16) * 1.5)  # cpu_mem = P * max(4 * gpus, 16) * 1.5


def test_zero3_param_offload_keeps_only_the_largest_layer_on_gpu() -> None:
    cfg = config({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                        "offload_param": {"device": "cpu"}}})
    plan = zero_plan(cfg)
    assert plan is not None
    need = offload_need(plan, fit(70 * GB, largest_layer_params=10**9), ranks=8)
    assert need is not None and need.gpu_bytes == 4 * 10**9


def test_offload_against_host_ram_and_memlock() -> None:
    cfg = config({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    small = HostMemory(total_bytes=256 * GB, available_bytes=200 * GB, memlock_bytes=64 * 2**10)
    verdict = judge_ds_zero(cfg, fit=fit(13 * GB), ranks=8, host=small)
    assert verdict.status is Status.FAIL and verdict.code == "DS_OFFLOAD_HOST_RAM"
    assert "DS_OFFLOAD_MEMLOCK" in codes(verdict)
    unpinned = config({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                                "pin_memory": False}}})
    roomy = HostMemory(total_bytes=4000 * GB, available_bytes=4000 * GB, memlock_bytes=64 * 2**10)
    assert judge_ds_zero(unpinned, fit=fit(13 * GB), ranks=8, host=roomy).status is Status.PASS


def test_nvme_offload_needs_a_path_with_room(tmp_path: Path) -> None:
    missing = config({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})
    assert "DS_NVME_PATH_MISSING" in codes(judge_ds_zero(missing, fit=None, ranks=8, host=ROOMY_HOST))
    cfg = config({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}})
    full = {"/nvme": PathSpace("/nvme", True, 100 * GB, True)}
    verdict = judge_ds_zero(cfg, fit=fit(70 * GB), ranks=8, host=ROOMY_HOST, nvme=full)
    assert verdict.code == "DS_NVME_SPACE" and "1,120.00 GB" in verdict.summary  # 16 bytes x 70B
    gone = {"/nvme": PathSpace("/nvme", False, None, None)}
    assert "DS_NVME_PATH_UNUSABLE" in codes(judge_ds_zero(cfg, fit=None, ranks=8, host=ROOMY_HOST, nvme=gone))


def test_qlora_under_zero2_keeps_frozen_weights_on_gpu() -> None:
    lora = lora_split(70 * GB, rank=16, hidden_size=8192, layers=80, base_bits=4)
    cfg = config({"zero_optimization": {"stage": 2}})
    verdict = judge_ds_zero(cfg, fit=fit(70 * GB, lora=lora), ranks=8, host=ROOMY_HOST)
    assert verdict.status is Status.PASS and "35." in verdict.summary  # 70B x 0.5 bytes on every GPU


# --- keys --------------------------------------------------------------------------------------------


def test_typos_removed_and_ignored_keys_name_the_nearest_key() -> None:
    verdict = judge_ds_keys(read_ds_config(CONFIGS / "typos_and_removed.json"), load_known_keys(), "0.19.8")
    found = {f["where"]: f for f in verdict.details["findings"]}
    assert verdict.status is Status.FAIL
    assert found["zero_optimization.overlap_com"]["code"] == "DS_KEY_REJECTED"
    assert "'overlap_comm'" in found["zero_optimization.overlap_com"]["message"]
    assert found["bf16.check_overflow"]["fix"] == "Rename it to 'check_grad_overflow'."
    assert found["zero_optimization.offload_optimizer.pin_memroy"]["code"] == "DS_KEY_REJECTED"
    assert found["gradient_acumulation_steps"]["code"] == "DS_KEY_IGNORED"
    assert found["gradient_acumulation_steps"]["status"] == "WARN"
    assert found["elasticity"]["code"] == "DS_KEY_REMOVED"


def test_rejected_keys_warn_on_another_deepspeed_version() -> None:
    verdict = judge_ds_keys(read_ds_config(CONFIGS / "typos_and_removed.json"), load_known_keys(), "0.16.4")
    assert verdict.status is Status.WARN
    assert "this node has DeepSpeed 0.16.4" in json.dumps(verdict.details["findings"])
    absent = judge_ds_keys(read_ds_config(CONFIGS / "typos_and_removed.json"), load_known_keys(), None)
    assert absent.status is Status.WARN and "not installed" in json.dumps(absent.details["findings"])


def test_auto_values_aliases_and_free_form_sections() -> None:
    hf = judge_ds_keys(read_ds_config(CONFIGS / "hf_auto_zero3.json"), load_known_keys(), "0.19.8")
    assert hf.status is Status.PASS and '9 "auto" values' in hf.summary
    dropped = judge_ds_keys(config({"zero_optimization": {"sub_group_size": "auto"}, "steps_per_print": "auto"}),
                            load_known_keys(), "0.19.8")
    assert {f["code"] for f in dropped.details["findings"]} == {"DS_AUTO_DROPPED", "DS_AUTO_UNFILLED"}
    free = judge_ds_keys(config({"optimizer": {"type": "AdamW", "params": {"anything_goes": 1}},
                                 "zero_optimization": {"stage3_prefetch_bucket_size": 5}}),
                         load_known_keys(), "0.19.8")
    assert free.status is Status.PASS
    deprecated = judge_ds_keys(config({"zero_optimization": {"cpu_offload": True}}), load_known_keys(), "0.19.8")
    assert deprecated.status is Status.PASS and "DS_KEY_DEPRECATED" in codes(deprecated)


def test_shipped_key_list_is_deepspeed_0_19_8() -> None:
    known = load_known_keys()
    assert known.deepspeed_version == "0.19.8"
    zero = known.section("zero_optimization")
    assert zero is not None and zero.rejects_unknown and "overlap_comm" in zero.keys
    assert zero.aliases["stage3_prefetch_bucket_size"] == "prefetch_bucket_size"
    top = known.section("")
    assert top is not None and not top.rejects_unknown and "train_micro_batch_size_per_gpu" in top.keys
    assert "elasticity" in known.removed and "elasticity" not in top.keys


# --- against real DeepSpeed, where an interpreter with it is available ---------------------------


def _deepspeed_python() -> str:
    """An interpreter with DeepSpeed installed: $PREFLIGHT_DEEPSPEED_PYTHON or this one."""
    candidate = os.environ.get("PREFLIGHT_DEEPSPEED_PYTHON", sys.executable)
    probe = subprocess.run([candidate, "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('deepspeed') is None)"], capture_output=True, timeout=60)
    if probe.returncode:
        pytest.skip("DeepSpeed is not installed (set PREFLIGHT_DEEPSPEED_PYTHON to an interpreter that has it)")
    return candidate


_REAL_BATCH = """
import json, sys
from deepspeed.runtime.config import DeepSpeedConfig
out = []
for train, micro, acc, world in json.loads(sys.argv[1]):
    cfg = {k: v for k, v in (("train_batch_size", train), ("train_micro_batch_size_per_gpu", micro),
                              ("gradient_accumulation_steps", acc)) if v is not None}
    obj = DeepSpeedConfig.__new__(DeepSpeedConfig)
    obj.world_size = world
    obj._initialize_params(dict(cfg))
    try:
        obj._configure_train_batch_size()
        out.append([obj.train_batch_size, obj.train_micro_batch_size_per_gpu, obj.gradient_accumulation_steps, None])
    except AssertionError as exc:
        out.append([obj.train_batch_size, obj.train_micro_batch_size_per_gpu, obj.gradient_accumulation_steps,
                    str(exc)])
print("RESULT" + json.dumps(out))
"""


@pytest.mark.e2e
def test_batch_cases_match_real_deepspeed() -> None:
    python = _deepspeed_python()
    cases = [list(given) for given, _ in DS_CASES]
    run = subprocess.run([python, "-c", _REAL_BATCH, json.dumps(cases)], capture_output=True, text=True, timeout=300)
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT"))
    for given, real in zip(cases, json.loads(line.removeprefix("RESULT")), strict=True):
        ours = deepspeed_batch(given[0], given[1], given[2], int(given[3] or 1))  # given: a JSON list
        assert [ours.train_batch, ours.micro_batch, ours.accumulation] == real[:3], given
        assert (ours.error is None) == (real[3] is None), (given, real[3])


@pytest.mark.e2e
def test_shipped_key_list_is_what_the_generator_writes(tmp_path: Path) -> None:
    python = _deepspeed_python()
    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('deepspeed'))"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    if version != load_known_keys().deepspeed_version:
        pytest.skip(f"DeepSpeed {version} installed; the shipped list describes {load_known_keys().deepspeed_version}")
    out = tmp_path / "keys.json"
    subprocess.run([python, str(REPO_ROOT / "tools" / "deepspeed_config_keys.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    fresh = known_keys_from(json.loads(out.read_text()))
    assert fresh == load_known_keys()


def test_zero3_parameter_offload_alone_moves_the_weight_shard() -> None:
    cfg = config({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
    plan = zero_plan(cfg)
    assert plan is not None
    plan_70b = fit(70 * GB, largest_layer_params=10**9)
    need = offload_need(plan, plan_70b, ranks=8)
    zero3 = next(f.need for f in plan_70b.strategies if f.need.name == "zero3")
    assert need is not None and need.gpu_bytes == zero3.bytes_per_gpu - 2 * 70 * GB // 8
    assert need.host_bytes == int(2 * 70 * GB * 1.5)


def test_accelerates_own_auto_keys_are_filled_not_dropped() -> None:
    # accelerate's plugin_to_config_mapping fills stage3_gather_16bit_weights_on_model_save and the offload devices
    accelerate = config({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto",
                                               "offload_optimizer": {"device": "auto"}}})
    verdict = judge_ds_keys(accelerate, load_known_keys(), "0.19.8")
    assert verdict.status is Status.PASS and set(codes(verdict)) == {"DS_AUTO"}
    assert "Accelerate's DeepSpeedPlugin" in verdict.summary and "stage3_gather_16bit" in verdict.summary
    stage = judge_ds_zero(config({"zero_optimization": {"stage": "auto"}}), fit=None, ranks=8, host=ROOMY_HOST)
    assert stage.status is Status.PASS and "ZeRO-2" in stage.summary and "ACCELERATE_DEEPSPEED_ZERO_STAGE" in \
        json.dumps(stage.details)


def test_legacy_bfloat16_auto_is_not_filled_by_the_trainer() -> None:
    legacy = judge_ds_precision(config({"bfloat16": {"enabled": "auto"}}), None)
    assert legacy.status is Status.WARN and legacy.code == "DS_AUTO_DROPPED"
    assert "legacy bfloat16" in legacy.summary and "sets it from --bf16" not in json.dumps(legacy.details)
    current = judge_ds_precision(config({"bf16": {"enabled": "auto"}}), None)
    assert current.status is Status.PASS and "sets it from --bf16" in json.dumps(current.details)


def test_pipeline_parallel_world_is_ranks_over_stages() -> None:
    # DeepSpeedExamples training/pipeline_parallelism: train_batch_size 256, micro 8, -p 2
    pipe = config({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 8})
    verdict = judge_ds_batch(pipe, JobWorld(8, "8 visible GPUs", 2, "train.py:131"))
    assert verdict.status is Status.PASS and "8 x 8 accumulation steps x 4 ranks" in verdict.summary.replace(
        " per GPU", "")
    assert "4 (8 ranks / 2 pipeline stages" in json.dumps(verdict.details)
    odd = judge_ds_batch(pipe, JobWorld(6, "--nproc 6", 4, "train.py:131"))
    assert odd.status is Status.FAIL and odd.code == "DS_PIPELINE_SPLIT"
