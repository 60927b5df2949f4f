"""The DeepSpeed config the ZeRO rehearsal generates (pure; DeepSpeed is not needed)."""

from __future__ import annotations

from typing import Any

import pytest

from preflight.workers.zero import parse_args, zero_config


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("bf16", [True, False])
def test_the_config_carries_the_stage_batch_arithmetic_and_precision(stage: int, bf16: bool) -> None:
    config = zero_config(stage=stage, micro_batch=4, accumulation=2, world_size=8, bf16=bf16)
    assert config["zero_optimization"]["stage"] == stage
    assert config["train_batch_size"] == 4 * 2 * 8
    assert config["train_micro_batch_size_per_gpu"] == 4 and config["gradient_accumulation_steps"] == 2
    assert config["bf16"] == {"enabled": bf16}
    assert config["optimizer"]["type"] == "AdamW"  # the fused op DeepSpeed JIT-builds on GPUs


def test_zero3_shards_even_tiny_parameters() -> None:
    assert zero_config(stage=3, micro_batch=1, accumulation=1, world_size=2, bf16=False)[
        "zero_optimization"]["stage3_param_persistence_threshold"] == 0
    assert "stage3_param_persistence_threshold" not in zero_config(
        stage=2, micro_batch=1, accumulation=1, world_size=2, bf16=False)["zero_optimization"]


@pytest.mark.parametrize(("kwargs", "message"), [({"stage": 0}, "stage must be 1, 2 or 3"),
                                                 ({"accumulation": 0}, "must be >= 1")])
def test_impossible_configs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        zero_config(**{"stage": 2, "micro_batch": 4, "accumulation": 2, "world_size": 2, "bf16": False, **kwargs})


def test_the_worker_arguments_need_a_stage() -> None:
    assert parse_args(["--stage", "2"]).accumulation == 2
    with pytest.raises(SystemExit):
        parse_args(["--stage", "4"])
