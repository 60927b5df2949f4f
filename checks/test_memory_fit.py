"""Will the model fit: model-state memory per GPU for DDP, ZeRO-1/2/3 and FSDP on this node."""

from __future__ import annotations

from preflight.launch.strategy_phases import StrategySelection
from preflight.judge.memory_fit import FitPlan, judge_planned_fit
from preflight.outcome import Verdict
from preflight.probe.gpu_memory import GpuMemorySource
from preflight.recording import Recorder


def test_memory_fit(record: Recorder, memory_fit_plan: FitPlan | Verdict, gpu_memory: GpuMemorySource,
                    strategies: StrategySelection) -> None:
    """Does the model fit this node's GPUs with at least one strategy?"""
    record(judge_planned_fit(memory_fit_plan, strategies.names, gpu_memory.source))
