"""LoRA and QLoRA in the memory fit: the formula, the strategies, and ``preflight size``."""

from __future__ import annotations

import json

import pytest

from preflight.commands.size import main
from preflight.errors import UsageError
from preflight.judge.memory_fit import judge_memory_fit, plan_lines, plan_memory_fit
from preflight.judge.sizing import BytesPerParam, lora_adapter_params, lora_split, min_gpus, size_strategy
from preflight.outcome import Status
from preflight.parse.quantity import QuantityError
from preflight.probe.gpu_memory import GpuMemory

GB = 10**9
SEVEN_B = 7 * GB


def test_adapter_count_is_two_r_h_per_matrix_per_layer() -> None:
    # Llama-2-7B shape (hidden 4096, 32 layers), r=16 on q_proj and v_proj: 2 x 16 x 4096 x 2 x 32.
    assert lora_adapter_params(rank=16, hidden_size=4096, layers=32) == 8_388_608
    assert lora_adapter_params(rank=8, hidden_size=4096, layers=32, matrices=4) == 8_388_608


@pytest.mark.parametrize(("bits", "frozen_gb"), [(16, 14.0), (8, 7.0), (4, 3.5)])
def test_ddp_is_frozen_at_base_bits_plus_trainable_at_18_bytes(bits: int, frozen_gb: float) -> None:
    lora = lora_split(SEVEN_B, rank=16, hidden_size=4096, layers=32, base_bits=bits)
    need = size_strategy("ddp", params=SEVEN_B, gpus=8, split=BytesPerParam(), lora=lora)
    assert need.bytes_per_gpu == frozen_gb * GB + 18 * 8_388_608
    assert need.frozen_bytes == frozen_gb * GB


def test_zero3_shards_frozen_weights_and_gathers_one_frozen_layer() -> None:
    lora = lora_split(SEVEN_B, trainable_params=40_000_000, base_bits=4)
    need = size_strategy("zero3", params=SEVEN_B, gpus=8, split=BytesPerParam(), largest_layer_params=10**8, lora=lora)
    frozen = (SEVEN_B - 40_000_000) * 0.5
    assert need.bytes_per_gpu == pytest.approx(frozen / 8 + 18 * 40_000_000 / 8 + 0.5 * 10**8, abs=1)
    zero2 = size_strategy("zero2", params=SEVEN_B, gpus=8, split=BytesPerParam(), lora=lora)
    assert zero2.bytes_per_gpu == pytest.approx(frozen + 2 * 40_000_000 + 16 * 40_000_000 / 8, abs=1)


def test_min_gpus_with_lora_is_tight() -> None:
    lora = lora_split(70 * GB, rank=16, hidden_size=8192, layers=80, base_bits=16)
    count = min_gpus("zero3", params=70 * GB, split=BytesPerParam(), available_bytes=20 * GB, lora=lora)
    assert count is not None
    def need(n: int) -> int:
        return size_strategy("zero3", params=70 * GB, gpus=n, split=BytesPerParam(), lora=lora).bytes_per_gpu
    assert need(count) <= 20 * GB < need(count - 1)
    assert min_gpus("ddp", params=70 * GB, split=BytesPerParam(), available_bytes=20 * GB, lora=lora) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trainable_params": 10, "rank": 8}, "not both"),
        ({"rank": 8}, "hidden size and layer count"),
        ({}, "trainable parameter count or a LoRA rank"),
        ({"trainable_params": 8 * GB}, "exceed the model"),
        ({"trainable_params": 10, "hidden_size": 4096}, "go with a LoRA rank"),
        ({"trainable_params": 10, "base_bits": 3}, "base bits must be one of"),
    ],
)
def test_combinations_that_say_nothing(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        lora_split(SEVEN_B, **kwargs)


def test_qlora_70b_fits_one_80gb_gpu_where_full_fine_tuning_needs_many() -> None:
    gpus = [GpuMemory(0, "NVIDIA H100 80GB HBM3", 80 * GB)]
    lora = lora_split(70 * GB, rank=16, hidden_size=8192, layers=80, base_bits=4)
    plan = plan_memory_fit(params=70 * GB, gpus=gpus, lora=lora)
    verdict = judge_memory_fit(plan)
    assert verdict.status is Status.PASS and "LoRA" in verdict.summary and "4-bit base" in verdict.summary
    assert plan_memory_fit(params=70 * GB, gpus=gpus).recommended is None
    text = "\n".join(plan_lines(plan, full=plan_memory_fit(params=70 * GB, gpus=gpus)))
    assert "frozen base weights at 4 bits = 0.5 bytes/param" in text
    assert "per GPU = frozen x 0.5 + trainable x 18" in text and "full FT/GPU" in text


def test_size_command_shows_lora_beside_full_fine_tuning(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model-params", "7B", "--gpus", "2", "--gpu-memory", "24GB", "--lora-rank", "16",
                 "--hidden-size", "4096", "--num-layers", "32", "--base-bits", "4"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:3] in ("DDP", "ZeR", "FSD")}
    assert "3.65 GB" in rows["DDP"] and "126.00 GB" in rows["DDP"]
    assert "adapters = 2 x rank 16 x hidden 4096 x 2 matrices x 32 layers = 8,388,608" in out
    assert "Recommended: DDP" in out


def test_size_command_json_keeps_both_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model-params", "7B", "--gpus", "1", "--gpu-memory", "24GB", "--trainable-params", "40M",
                 "--base-bits", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"]["base_bits"] == 8 and data["lora"]["trainable_params"] == 40_000_000
    assert data["full_fine_tuning"]["lora"] is None and data["recommended"] == "ddp"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lora-rank", "16"], "hidden size and layer count"),
        (["--base-bits", "3"], "invalid choice"),
        (["--trainable-params", "9B"], "exceed the model"),
        (["--lora-rank", "0", "--hidden-size", "1", "--num-layers", "1"], "expected a number >= 1"),
    ],
)
def test_size_command_bad_lora_input(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        main(["--model-params", "7B", "--gpus", "1", "--gpu-memory", "24GB", *argv])
