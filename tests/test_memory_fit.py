"""The sizing model against hand-computed tables, the ZeRO paper and DeepSpeed's estimator."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from preflight.judge.memory_fit import GpuMemory, judge_memory_fit, plan_as_dict, plan_lines, plan_memory_fit
from preflight.judge.sizing import BytesPerParam, gather_params, min_gpus, parse_bytes_per_param, size_strategy
from preflight.outcome import Status
from preflight.parse.quantity import Headroom, QuantityError

GB = 10**9


def gpus(count: int, total: int = 80 * GB, used: int = 0, name: str = "NVIDIA H100 80GB HBM3") -> list[GpuMemory]:
    return [GpuMemory(index=i, name=name, total_bytes=total, used_bytes=used) for i in range(count)]


# 7B on 8 x 80 GB, 18 bytes/param split 2/4/8/4, largest layer assumed 10 % = 700M (gather 4 x 700M = 2.8 GB):
#   ddp   18 x 7e9                      = 126 GB
#   zero1 (2+4) x 7e9 + (4+8) x 7e9 / 8 = 42 + 10.5  = 52.5 GB
#   zero2 2 x 7e9 + (4+8+4) x 7e9 / 8   = 14 + 14    = 28 GB
#   zero3 18 x 7e9 / 8 + 2.8            = 15.75 + 2.8 = 18.55 GB
#   fsdp  (4+8+4) x 7e9 / 8 + 2.8       = 14 + 2.8   = 16.8 GB
SEVEN_B_ON_8 = {"ddp": 126.0, "zero1": 52.5, "zero2": 28.0, "zero3": 18.55, "fsdp": 16.8}


@pytest.mark.parametrize(("name", "expected_gb"), sorted(SEVEN_B_ON_8.items()))
def test_7b_on_8_gpus(name: str, expected_gb: float) -> None:
    need = size_strategy(name, params=7 * GB, gpus=8, split=BytesPerParam())
    assert need.bytes_per_gpu == round(expected_gb * GB)


def test_7b_zero3_is_15_75_gb_plus_the_gathered_layer() -> None:
    need = size_strategy("zero3", params=7 * GB, gpus=8, split=BytesPerParam(), largest_layer_params=131_072_000)
    assert need.gather_bytes == 4 * 131_072_000
    assert need.bytes_per_gpu == 15_750_000_000 + 524_288_000


def test_what_each_strategy_shards() -> None:
    split = BytesPerParam()
    sharded = {n: size_strategy(n, params=10**9, gpus=2, split=split).sharded for n in SEVEN_B_ON_8}
    assert sharded["ddp"] == ()
    assert sharded["zero1"] == ("master", "optimizer")  # DeepSpeed ZeRO-1 shards the fp32 master with Adam's state
    assert sharded["zero2"] == ("master", "optimizer", "gradients")
    assert sharded["zero3"] == ("weights", "master", "optimizer", "gradients")
    assert sharded["fsdp"] == ("master", "optimizer", "gradients")
    assert size_strategy("fsdp", params=10**9, gpus=2, split=split).replicated == ()


def test_fsdp_without_master_weights_shards_the_weights_themselves() -> None:
    split = parse_bytes_per_param("master=0")
    fsdp = size_strategy("fsdp", params=10**9, gpus=4, split=split)
    zero3 = size_strategy("zero3", params=10**9, gpus=4, split=split)
    assert fsdp.sharded == zero3.sharded
    assert fsdp.bytes_per_gpu == zero3.bytes_per_gpu == 14 * 10**9 // 4 + 4 * 10**8


# ZeRO paper (Rajbhandari et al. 2020) Figure 1: 7.5B parameters, 64 GPUs, K = 12, fp16 gradients:
# baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.88 GB.
@pytest.mark.parametrize(
    ("name", "expected"),
    [("ddp", 120 * GB), ("zero1", 31_406_250_000), ("zero2", 16_640_625_000), ("zero3", 1_875_000_000 + 4)],
)
def test_zero_paper_figure_1(name: str, expected: int) -> None:
    split = parse_bytes_per_param("gradients=2")
    assert split.total == 16
    need = size_strategy(name, params=7_500_000_000, gpus=64, split=split, largest_layer_params=1)
    assert need.bytes_per_gpu == expected


def test_deepspeed_zero2_estimator_2p_plus_18p_over_n() -> None:
    """DeepSpeed memory.rst: ZeRO-2 without offload needs 2P + 18P/n (fp16 and fp32 gradients)."""
    split = parse_bytes_per_param("weights=2,master=4,optimizer=8,gradients=6")
    params, n = 3 * GB, 4
    assert size_strategy("zero2", params=params, gpus=n, split=split).bytes_per_gpu == 2 * params + 18 * params // n


def test_largest_layer_assumption_is_10_percent_capped_at_2_5b() -> None:
    assert gather_params(7 * GB, None) == 700_000_000
    assert gather_params(70 * GB, None) == 2_500_000_000
    assert gather_params(70 * GB, 1_000_000_000) == 1_000_000_000


@pytest.mark.parametrize(
    ("name", "expected"), [("ddp", None), ("zero1", 4), ("zero2", 3), ("zero3", 3), ("fsdp", 2)]
)
def test_min_gpus_for_7b_on_64_gb_usable(name: str, expected: int | None) -> None:
    # zero1: 42 + 84/N <= 64 -> N >= 3.82; zero2: 14 + 112/N -> 2.24; zero3: 2.8 + 126/N -> 2.06; fsdp: 1.83
    assert min_gpus(name, params=7 * GB, split=BytesPerParam(), available_bytes=64 * GB) == expected


def test_min_gpus_is_one_when_everything_fits_on_one() -> None:
    assert min_gpus("ddp", params=10**9, split=BytesPerParam(), available_bytes=64 * GB) == 1


def test_min_gpus_none_when_the_gather_alone_does_not_fit() -> None:
    assert min_gpus("zero3", params=70 * GB, split=BytesPerParam(), available_bytes=9 * GB) is None


@pytest.mark.parametrize("name", ["ddp", "zero1", "zero2", "zero3", "fsdp"])
def test_min_gpus_is_tight(name: str) -> None:
    split, available = BytesPerParam(), 30 * GB
    count = min_gpus(name, params=3 * GB, split=split, available_bytes=available)
    if count is None:
        assert size_strategy(name, params=3 * GB, gpus=10**6, split=split).bytes_per_gpu > available
        return
    assert size_strategy(name, params=3 * GB, gpus=count, split=split).bytes_per_gpu <= available
    if count > 1:
        assert size_strategy(name, params=3 * GB, gpus=count - 1, split=split).bytes_per_gpu > available


def test_bytes_per_param_total_scales_the_default_split() -> None:
    split = parse_bytes_per_param("16")
    assert split.total == 16
    assert split.weights == Fraction(16, 9) and split.optimizer == Fraction(64, 9)
    assert parse_bytes_per_param("18") == BytesPerParam()


def test_bytes_per_param_named_parts_keep_other_defaults() -> None:
    split = parse_bytes_per_param(" weights=2 , gradients=2.5 ")
    assert (split.weights, split.master, split.optimizer, split.gradients) == (Fraction(2), Fraction(4), Fraction(8), Fraction(5, 2))
    assert split.checkpoint() == 14
    assert BytesPerParam().describe() == "18 bytes/param (weights 2 + master 4 + optimizer 8 + gradients 4)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("0", "greater than zero"),
        ("-2", "negative"),
        ("abc", "not a number"),
        ("nan", "not a number"),
        ("inf", "not a number"),
        ("1/0", "not a number"),
        ("2000", "more than 1000"),
        ("adam=8", "is not one of"),
        ("weights", "not a number"),
        ("weights=2,weights=3", "twice"),
        ("weights=-1", "negative"),
        ("weights=0,master=0,optimizer=0,gradients=0", "more than zero"),
    ],
)
def test_bad_bytes_per_param(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_bytes_per_param(text)


@pytest.mark.parametrize("text", ["18", "16", "weights=2,gradients=2", "master=0", "12.5", "weights=16/9"])
def test_bytes_per_param_text_round_trips(text: str) -> None:
    """The preflight CLI hands parsed options to pytest as ``str(value)``: it must read back the same."""
    split = parse_bytes_per_param(text)
    assert parse_bytes_per_param(str(split)) == split


def test_unknown_strategy_and_zero_gpus() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        size_strategy("zero4", params=1, gpus=1, split=BytesPerParam())
    with pytest.raises(ValueError, match="at least one GPU"):
        size_strategy("ddp", params=1, gpus=0, split=BytesPerParam())


def test_plan_7b_on_8x80gb() -> None:
    plan = plan_memory_fit(params=7 * GB, gpus=gpus(8))
    assert plan.available_bytes == 64 * GB
    assert {f.need.name: f.fits for f in plan.strategies} == {
        "ddp": False, "zero1": True, "zero2": True, "zero3": True, "fsdp": True}
    assert plan.recommended == "zero1"
    assert plan.gpus_needed == ("fsdp", 2)


def test_plan_70b_on_8x80gb_needs_more_gpus() -> None:
    # zero3: 10 GB gather (2.5B cap) + 1260/N <= 64 -> 24; fsdp: 10 + 1120/N <= 64 -> 21
    plan = plan_memory_fit(params=70 * GB, gpus=gpus(8))
    assert plan.fitting == ()
    assert plan.recommended is None
    assert {f.need.name: f.min_gpus for f in plan.strategies} == {
        "ddp": None, "zero1": None, "zero2": None, "zero3": 24, "fsdp": 21}
    assert plan.gpus_needed == ("fsdp", 21)


def test_used_memory_on_one_gpu_decides() -> None:
    cards = gpus(8)
    cards[5] = GpuMemory(index=5, name="NVIDIA H100 80GB HBM3", total_bytes=80 * GB, used_bytes=30 * GB)
    plan = plan_memory_fit(params=7 * GB, gpus=cards)
    assert plan.tightest.index == 5
    assert plan.available_bytes == 34 * GB
    assert plan.recommended == "zero2"


def test_headroom_as_size_and_zero() -> None:
    plan = plan_memory_fit(params=7 * GB, gpus=gpus(8), headroom=Headroom(absolute_bytes=10 * GB))
    assert plan.available_bytes == 70 * GB
    assert plan_memory_fit(params=7 * GB, gpus=gpus(8), headroom=Headroom(fraction=Decimal(0))).available_bytes == 80 * GB


def test_plan_rejects_impossible_inputs() -> None:
    with pytest.raises(ValueError, match="at least one GPU"):
        plan_memory_fit(params=7 * GB, gpus=[])
    with pytest.raises(ValueError, match="largest layer"):
        plan_memory_fit(params=7 * GB, gpus=gpus(1), largest_layer_params=8 * GB)


def test_verdict_pass_when_ddp_fits() -> None:
    verdict = judge_memory_fit(plan_memory_fit(params=GB, gpus=gpus(8)))
    assert verdict.status is Status.PASS
    assert "fits with plain DDP" in verdict.summary and "8 x NVIDIA H100 80GB HBM3" in verdict.summary


def test_verdict_warn_when_only_sharding_fits() -> None:
    verdict = judge_memory_fit(plan_memory_fit(params=7 * GB, gpus=gpus(8)))
    assert verdict.status is Status.WARN
    assert verdict.code == "MEMORY_FIT_NEEDS_SHARDING"
    assert "126.00 GB per GPU" in verdict.summary and "ZeRO-1 fits at 52.50 GB" in verdict.summary
    assert verdict.remediation is not None and "ZeRO-1" in verdict.remediation
    assert verdict.views[0].data["highlight"] == [1]
    assert {m.labels.get("strategy"): m.value for m in verdict.metrics if m.labels}["ddp"] == 126 * GB


def test_verdict_fail_names_the_gpus_needed() -> None:
    verdict = judge_memory_fit(plan_memory_fit(params=70 * GB, gpus=gpus(8)))
    assert verdict.status is Status.FAIL
    assert verdict.code == "MEMORY_FIT_NONE"
    assert verdict.remediation is not None and "at least 21 GPUs" in verdict.remediation
    assert "FSDP full shard needs 150.00 GB per GPU" in verdict.summary


def test_verdict_fail_when_no_gpu_count_helps() -> None:
    verdict = judge_memory_fit(plan_memory_fit(params=70 * GB, gpus=gpus(2, total=8 * GB)))
    assert verdict.status is Status.FAIL
    assert verdict.remediation is not None and "No number of these GPUs" in verdict.remediation


def test_plan_dict_and_lines() -> None:
    plan = plan_memory_fit(params=7 * GB, gpus=gpus(8), largest_layer_params=131_072_000)
    data = plan_as_dict(plan)
    assert [s["name"] for s in data["strategies"]] == ["ddp", "zero1", "zero2", "zero3", "fsdp"]
    assert data["strategies"][3]["bytes_per_gpu"] == 16_274_288_000
    assert data["largest_layer_assumed"] is False
    assert data["recommended"] == "zero1"
    text = "\n".join(plan_lines(plan))
    assert "126.00 GB" in text and "Recommended: ZeRO-1" in text
    assert "largest layer: 131.072M parameters" in text


def test_verdict_fail_names_memory_already_used() -> None:
    cards = gpus(8)
    cards[3] = GpuMemory(index=3, name="NVIDIA H100 80GB HBM3", total_bytes=80 * GB, used_bytes=70 * GB)
    verdict = judge_memory_fit(plan_memory_fit(params=7 * GB, gpus=cards))
    assert verdict.status is Status.FAIL
    assert "no memory usable (GPU 3 (NVIDIA H100 80GB HBM3) is the tightest, 70.00 GB already in use)" in verdict.summary
    assert verdict.remediation is not None and verdict.remediation.startswith("Free the memory already used on GPU 3")


def test_a_zero_config_without_a_model_size_says_that_is_why() -> None:
    """Issue 26: "memory fit not checked: it needs ... a visible GPU" while 8 GPUs were visible."""
    from preflight.job_plan import PlanNode, unfit_why
    from preflight.judge.ds_config import HostMemory, judge_ds_zero
    from preflight.parse.ds_config import parse_ds_config

    host = HostMemory(2048 * 2**30, 2000 * 2**30, None)
    gpus = tuple(GpuMemory(i, "NVIDIA H100 80GB HBM3", 81559 * 2**20) for i in range(8))
    node = PlanNode(8, 8, None, None, gpus, 8, "8 visible GPUs", 192, host, None)
    verdict = judge_ds_zero(parse_ds_config('{"zero_optimization": {"stage": 3}}'), fit=None, ranks=8, host=host,
                            unfit_why=unfit_why(node))
    assert "memory fit not checked: it needs --model-params (8 GPU(s) visible to size it on)" in verdict.summary
    bare = PlanNode(0, 0, None, None, (), 1, "no GPU", 8, host, None)
    assert unfit_why(bare) == "no GPU whose memory NVML reports is visible to the job"
