"""Will the model fit: model-state memory per GPU for DDP, ZeRO-1/2/3 and FSDP on this node."""

from __future__ import annotations

from preflight.fixtures.strategies import StrategySelection
from preflight.judge.memory_fit import DEFAULT_HEADROOM, judge_memory_fit, plan_memory_fit
from preflight.judge.strategies import with_rehearsal_pointer
from preflight.judge.sizing import BytesPerParam, LoraSplit
from preflight.outcome import skip
from preflight.probe.gpu_memory import GpuMemorySource
from preflight.recording import Recorder
from preflight.settings import Settings


def test_memory_fit(
    record: Recorder, settings: Settings, gpu_memory: GpuMemorySource, bytes_per_param: BytesPerParam,
    strategies: StrategySelection, lora: LoraSplit | None,
) -> None:
    """Does the model fit this node's GPUs with at least one strategy?"""
    params = settings.option("model_params")
    if params is None:
        record(skip("no model size given: pass --model-params (e.g. 7B) to size the job on this node"))
        return
    if not gpu_memory.gpus:
        record(skip(gpu_memory.reason or "no NVIDIA GPU visible"))
        return
    plan = plan_memory_fit(
        params=params,
        gpus=gpu_memory.gpus,
        split=bytes_per_param,
        largest_layer_params=settings.option("largest_layer_params"),
        headroom=settings.option("headroom") or DEFAULT_HEADROOM,
        lora=lora,
    )
    verdict = with_rehearsal_pointer(judge_memory_fit(plan), plan.recommended, strategies.names, plan.fitting)
    record(verdict.with_extra(evidence={"gpu memory source": gpu_memory.source}))
