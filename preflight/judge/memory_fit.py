"""Will the model fit: each strategy's bytes per GPU against each GPU's free memory.

The sizing itself is :mod:`preflight.judge.sizing`. Here each strategy is compared with the
memory a GPU can give to model state: its total, minus what is already used, minus a headroom
for activations and temporary tensors. The default headroom, 20 % of each GPU, is the inverse of
ml-engineering's quick estimate ``params x 18 x 1.25 / GPU memory`` (model state may take up to
80 % of a GPU); override it with a percentage or a size. The tightest GPU decides, since every
rank holds the same shard.

With a :class:`~preflight.judge.sizing.LoraSplit` (LoRA/QLoRA) the plan sizes frozen and trainable
parameters apart; ``plan_lines`` states that formula and, given the full fine-tuning plan of the
same model, shows both side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from preflight.judge.sizing import (
    ASSUMED_LARGEST_LAYER_CAP,
    ASSUMED_LARGEST_LAYER_FRACTION,
    COMPONENT_MEANING,
    STRATEGY_ORDER,
    STRATEGY_TITLES,
    BytesPerParam,
    LoraSplit,
    StrategyNeed,
    gather_params,
    min_gpus,
    size_strategy,
)
from preflight.outcome import Metric, Verdict, VerdictParts, View, fail, passed, warn
from preflight.parse.quantity import Headroom, format_bytes, format_param_count
from preflight.probe.gpu_memory import GpuMemory

__all__ = ["DEFAULT_HEADROOM", "FitPlan", "GpuMemory", "StrategyFit", "judge_memory_fit", "judge_planned_fit",
           "plan_as_dict", "plan_lines", "plan_memory_fit", "strategy_view"]

DEFAULT_HEADROOM = Headroom(fraction=Decimal("0.2"))

USED_WORTH_NAMING = 10**9
"""Memory already used on a GPU that the summary names (other processes, a leftover run)."""


@dataclass(frozen=True, slots=True)
class StrategyFit:
    """One strategy against the tightest GPU."""

    need: StrategyNeed
    fits: bool
    min_gpus: int | None


@dataclass(frozen=True, slots=True)
class FitPlan:
    """Everything the table, the JSON and the verdict show."""

    params: int
    split: BytesPerParam
    largest_layer_params: int
    largest_layer_assumed: bool
    headroom: Headroom
    gpus: tuple[GpuMemory, ...]
    tightest: GpuMemory
    available_bytes: int
    strategies: tuple[StrategyFit, ...]
    lora: LoraSplit | None = None

    @property
    def fitting(self) -> tuple[str, ...]:
        """Names of the strategies that fit, least sharding first."""
        return tuple(fit.need.name for fit in self.strategies if fit.fits)

    @property
    def recommended(self) -> str | None:
        """The least sharding that fits (less communication), or None."""
        return self.fitting[0] if self.fitting else None

    @property
    def gpus_needed(self) -> tuple[str, int] | None:
        """The strategy needing the fewest GPUs of the tightest kind, and that count."""
        options = [(fit.min_gpus, fit.need.name) for fit in self.strategies if fit.min_gpus is not None]
        if not options:
            return None
        count, name = min(options, key=lambda item: (item[0], STRATEGY_ORDER.index(item[1])))
        return name, count


def plan_memory_fit(
    *,
    params: int,
    gpus: Sequence[GpuMemory],
    split: BytesPerParam | None = None,
    largest_layer_params: int | None = None,
    headroom: Headroom = DEFAULT_HEADROOM,
    lora: LoraSplit | None = None,
) -> FitPlan:
    """Size every strategy for ``params`` on ``gpus`` and compare with the tightest GPU.

    With ``lora``, ``params`` is the whole model and only ``lora.trainable_params`` are trained.
    """
    if not gpus:
        raise ValueError("memory fit needs at least one GPU")
    if params < 1:
        raise ValueError(f"model size must be at least one parameter, got {params}")
    split = split or BytesPerParam()
    if largest_layer_params is not None and not 0 < largest_layer_params <= params:
        raise ValueError(
            f"largest layer ({largest_layer_params:,} parameters) must be between 1 and the model size ({params:,})"
        )
    tightest = min(gpus, key=lambda gpu: (_available(gpu, headroom), gpu.index))
    available = _available(tightest, headroom)
    fits: list[StrategyFit] = []
    for name in STRATEGY_ORDER:
        need = size_strategy(
            name, params=params, gpus=len(gpus), split=split, largest_layer_params=largest_layer_params, lora=lora
        )
        fewest = (
            min_gpus(name, params=params, split=split, available_bytes=available,
                     largest_layer_params=largest_layer_params, lora=lora)
            if available > 0
            else None
        )
        fits.append(StrategyFit(need=need, fits=need.bytes_per_gpu <= available, min_gpus=fewest))
    return FitPlan(
        params=params,
        split=split,
        largest_layer_params=gather_params(params, largest_layer_params),
        largest_layer_assumed=largest_layer_params is None,
        headroom=headroom,
        gpus=tuple(gpus),
        tightest=tightest,
        available_bytes=available,
        strategies=tuple(fits),
        lora=lora,
    )


def judge_memory_fit(plan: FitPlan) -> Verdict:
    """PASS when DDP fits, WARN when only a sharded strategy does, FAIL when nothing fits."""
    model = _model_text(plan)
    where = f"{len(plan.gpus)} x {plan.tightest.name or format_bytes(plan.tightest.total_bytes) + ' GPU'}"
    room = (
        f"{format_bytes(plan.available_bytes)} usable per GPU" if plan.available_bytes > 0 else "no memory usable"
    ) + f" ({_gpu_label(plan.tightest)} is the tightest{_used_note(plan.tightest)})"
    extra: VerdictParts = {
        "metrics": _metrics(plan),
        "views": (strategy_view(plan),),
        "details": plan_as_dict(plan),
        "evidence": {"memory fit": "\n".join(plan_lines(plan))},
    }
    recommended = plan.recommended
    if recommended == "ddp":
        return passed(f"{model} fits with plain DDP on {where}: {room}", **extra)
    if recommended is not None:
        need = _fit(plan, recommended).need
        ddp = _fit(plan, "ddp").need
        return warn(
            "MEMORY_FIT_NEEDS_SHARDING",
            f"{model} does not fit with plain DDP on {where} ({format_bytes(ddp.bytes_per_gpu)} per GPU, "
            f"{room}); {STRATEGY_TITLES[recommended]} fits at {format_bytes(need.bytes_per_gpu)} per GPU",
            f"Train with {STRATEGY_TITLES[recommended]} or more sharding ({', '.join(plan.fitting)} fit); "
            "plain DDP will run out of GPU memory at the first step.",
            **extra,
        )
    needed = plan.gpus_needed
    remedy = (
        f"Use at least {needed[1]} GPUs like {_gpu_label(plan.tightest)} with {STRATEGY_TITLES[needed[0]]}, "
        "offload optimizer state to CPU, or pick a smaller model or leaner precision (--bytes-per-param)."
        if needed
        else "No number of these GPUs holds it: offload to CPU/NVMe, use larger GPUs, or a smaller model."
    )
    if plan.tightest.used_bytes >= USED_WORTH_NAMING:
        remedy = (
            f"Free the memory already used on {_gpu_label(plan.tightest)} (`nvidia-smi` lists the processes "
            f"holding it) or leave that GPU out with CUDA_VISIBLE_DEVICES. Otherwise: {remedy}"
        )
    smallest = min(plan.strategies, key=lambda fit: fit.need.bytes_per_gpu).need
    return fail(
        "MEMORY_FIT_NONE",
        f"{model} does not fit on {where} with any strategy: even {smallest.title} needs "
        f"{format_bytes(smallest.bytes_per_gpu)} per GPU, {room}",
        remedy,
        **extra,
    )


def plan_as_dict(plan: FitPlan) -> dict[str, Any]:
    """Plain JSON of the plan: what ``preflight size --json`` prints and the report keeps."""
    needed = plan.gpus_needed
    return {
        "model_params": plan.params,
        "bytes_per_param": plan.split.as_dict(),
        "largest_layer_params": plan.largest_layer_params,
        "largest_layer_assumed": plan.largest_layer_assumed,
        "headroom": plan.headroom.describe(),
        "gpus": [
            {"index": gpu.index, "name": gpu.name, "total_bytes": gpu.total_bytes, "used_bytes": gpu.used_bytes}
            for gpu in plan.gpus
        ],
        "tightest_gpu": plan.tightest.index,
        "available_bytes_per_gpu": plan.available_bytes,
        "strategies": [
            {
                "name": fit.need.name,
                "title": fit.need.title,
                "bytes_per_gpu": fit.need.bytes_per_gpu,
                "fits": fit.fits,
                "sharded": list(fit.need.sharded),
                "replicated": list(fit.need.replicated),
                "gather_bytes": fit.need.gather_bytes,
                "min_gpus": fit.min_gpus,
            }
            for fit in plan.strategies
        ],
        "fitting": list(plan.fitting),
        "recommended": plan.recommended,
        "gpus_needed": {"strategy": needed[0], "gpus": needed[1]} if needed else None,
        "lora": plan.lora.as_dict() if plan.lora else None,
    }


def strategy_view(plan: FitPlan) -> View:
    """The per-strategy table for the HTML report, recommended row highlighted."""
    rows = [
        [
            fit.need.title,
            format_bytes(fit.need.bytes_per_gpu),
            "yes" if fit.fits else "no",
            _shards(fit.need),
            "-" if fit.min_gpus is None else str(fit.min_gpus),
        ]
        for fit in plan.strategies
    ]
    highlight = [i for i, fit in enumerate(plan.strategies) if fit.need.name == plan.recommended]
    return View(
        kind="table",
        title=f"Model state per GPU, {format_param_count(plan.params)} parameters on {len(plan.gpus)} GPUs",
        data={
            "columns": ["strategy", "per GPU", "fits", "sharded", "min GPUs"],
            "rows": rows,
            "highlight": highlight,
        },
    )


def plan_lines(plan: FitPlan, full: FitPlan | None = None) -> list[str]:
    """The plan as plain text: header, one row per strategy, assumptions and the answer.

    ``full`` (the full fine-tuning plan of the same model) adds its per-GPU figures beside a
    LoRA plan's.
    """
    gpu = plan.tightest
    headroom_bytes = plan.headroom.bytes_of(gpu.total_bytes)
    lines = [
        *_model_lines(plan, full),
        f"GPUs: {len(plan.gpus)} x {format_bytes(gpu.total_bytes)}"
        + (f", {format_bytes(gpu.used_bytes)} already used on {_gpu_label(gpu)}" if gpu.used_bytes else ""),
        f"Usable for model state: {format_bytes(plan.available_bytes)} per GPU "
        f"(headroom for activations: {_headroom_text(plan.headroom, headroom_bytes)})",
        "",
        f"{'strategy':<16} {'per GPU':>12}  {'fits':<4}  {'min GPUs':>8}"
        + (f"  {'full FT/GPU':>12}  {'fits':<4}" if full else "") + "  sharded",
    ]
    for fit in plan.strategies:
        fewest = "-" if fit.min_gpus is None else str(fit.min_gpus)
        beside = ""
        if full is not None:
            other = _fit(full, fit.need.name)
            beside = f"  {format_bytes(other.need.bytes_per_gpu):>12}  {'yes' if other.fits else 'no':<4}"
        lines.append(
            f"{fit.need.title:<16} {format_bytes(fit.need.bytes_per_gpu):>12}  {'yes' if fit.fits else 'no':<4}"
            f"  {fewest:>8}{beside}  {_shards(fit.need)}"
        )
    layer = f"{format_param_count(plan.largest_layer_params)} parameters"
    lines += [
        "",
        "Model state only: activations and temporary tensors must fit in the headroom.",
        (
            f"ZeRO-3/FSDP gather room assumes a largest layer of {layer} "
            f"({float(ASSUMED_LARGEST_LAYER_FRACTION):.0%} of the model, at most "
            f"{format_param_count(ASSUMED_LARGEST_LAYER_CAP)}); give --largest-layer-params for the real figure."
            if plan.largest_layer_assumed
            else f"ZeRO-3/FSDP gather room for the largest layer: {layer}."
        ),
    ]
    needed = plan.gpus_needed
    if plan.recommended:
        lines.append(f"Fits: {', '.join(plan.fitting)}. "
                     f"Recommended: {STRATEGY_TITLES[plan.recommended]} (least sharding that fits).")
    elif needed:
        lines.append(
            f"Nothing fits on {len(plan.gpus)} GPUs. "
            f"{STRATEGY_TITLES[needed[0]]} needs at least {needed[1]} GPUs of this kind."
        )
    else:
        lines.append("Nothing fits, on any number of GPUs of this kind.")
    return lines


def _model_text(plan: FitPlan) -> str:
    """``7B parameters at 18 bytes/param (...)`` or the LoRA formula."""
    if plan.lora is None:
        return f"{format_param_count(plan.params)} parameters at {plan.split.describe()}"
    return f"{format_param_count(plan.params)}-parameter model, LoRA: {plan.lora.describe(plan.split)}"


def _model_lines(plan: FitPlan, full: FitPlan | None) -> list[str]:
    """The model and its rule; for LoRA the formula, stated like the 18-byte rule."""
    lora = plan.lora
    if lora is None:
        return [f"Model: {format_param_count(plan.params)} parameters ({plan.params:,}), {plan.split.describe()}"]
    frozen = f"{float(lora.frozen_bytes):g}"
    lines = [
        f"Model: {format_param_count(plan.params)} parameters ({plan.params:,}), LoRA/QLoRA fine-tuning",
        f"Rule: frozen base weights at {lora.base_bits} bits = {frozen} bytes/param (no gradients, no optimizer "
        f"state); trainable parameters at the full {plan.split.describe()}",
        f"  per GPU = frozen x {frozen} + trainable x {_number_text(plan.split)}, each part sharded as the strategy "
        "shards it (ZeRO-3 and FSDP also shard the frozen weights)",
        f"  frozen {format_param_count(lora.frozen_params)} ({lora.frozen_params:,}), trainable "
        f"{format_param_count(lora.trainable_params)} ({lora.trainable_params:,}): {lora.how}",
    ]
    if full is not None:
        lines.append(f"Beside it: full fine-tuning of the same model at {full.split.describe()}")
    return lines


def _number_text(split: BytesPerParam) -> str:
    """``18`` or ``16.5``."""
    return f"{float(split.total):g}"


def _shards(need: StrategyNeed) -> str:
    """``fp32 master weights, optimizer state (Adam m, v) + gather`` or ``nothing``."""
    parts = [COMPONENT_MEANING[part] for part in need.sharded]
    text = ", ".join(parts) if parts else "nothing"
    return text + (f" (+{format_bytes(need.gather_bytes)} gathered layer)" if need.gather_bytes else "")


def _headroom_text(headroom: Headroom, headroom_bytes: int) -> str:
    """``20% of each GPU = 16.00 GB`` or ``10.00 GB``."""
    if headroom.absolute_bytes is not None:
        return format_bytes(headroom_bytes)
    return f"{headroom.describe()} = {format_bytes(headroom_bytes)}"


def _available(gpu: GpuMemory, headroom: Headroom) -> int:
    """Bytes a GPU can give to model state (may be negative)."""
    return gpu.total_bytes - gpu.used_bytes - headroom.bytes_of(gpu.total_bytes)


def _fit(plan: FitPlan, name: str) -> StrategyFit:
    """The row of one strategy."""
    return next(fit for fit in plan.strategies if fit.need.name == name)


def _used_note(gpu: GpuMemory) -> str:
    """``, 75.16 GB already in use`` when other processes hold a noticeable amount."""
    return f", {format_bytes(gpu.used_bytes)} already in use" if gpu.used_bytes >= USED_WORTH_NAMING else ""


def _gpu_label(gpu: GpuMemory) -> str:
    """``GPU 3 (NVIDIA H100 80GB HBM3)``."""
    return f"GPU {gpu.index} ({gpu.name})" if gpu.name else f"GPU {gpu.index}"


def _metrics(plan: FitPlan) -> tuple[Metric, ...]:
    """Bytes per GPU of each strategy and the usable bytes, for the report."""
    found = [Metric("usable_bytes_per_gpu", plan.available_bytes, "B")]
    found += [
        Metric("model_state_bytes_per_gpu", fit.need.bytes_per_gpu, "B", labels={"strategy": fit.need.name})
        for fit in plan.strategies
    ]
    return tuple(found)


def judge_planned_fit(plan: FitPlan | Verdict, selected: Sequence[str], source: str) -> Verdict:
    """The memory-fit check: the plan's verdict pointing at the rehearsal of its recommended strategy, with
    where the GPUs' memory came from; a Verdict instead of a plan (no --model-params, no GPU) as it is."""
    if isinstance(plan, Verdict):
        return plan
    from preflight.judge.strategies import with_rehearsal_pointer

    verdict = with_rehearsal_pointer(judge_memory_fit(plan), plan.recommended, selected, plan.fitting)
    return verdict.with_extra(evidence={"gpu memory source": source})
