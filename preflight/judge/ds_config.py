"""A DeepSpeed config judged against this node and the job's ranks, before anything runs.

Every rule follows DeepSpeed 0.19.8's own code (line numbers in its ``deepspeed/runtime/config.py``):

* batch arithmetic: ``_set_batch_related_parameters`` (607-652) fills the missing one of
  ``train_batch_size``, ``train_micro_batch_size_per_gpu`` and ``gradient_accumulation_steps``
  with floor divisions, then ``_batch_assertion`` (590-605) refuses any triple with
  ``train_batch != micro_batch * grad_acc * world_size``; the world size is the rank count, divided
  by ``sequence_parallel_size`` when the config has one (465-468), or ``data_parallel_size`` when it
  has both (deepspeed/__init__.py:543-546, a device mesh);
* precision: fp16 and bf16 both enabled is an assertion (521-522); bf16 needs bf16 hardware,
  compute capability 8.0 (Ampere) or newer;
* ZeRO and offload: the stage's bytes per GPU from :mod:`preflight.judge.sizing`; with offload,
  DeepSpeed's own estimators (runtime/zero/stage_1_and_2.py:4017-4034,
  runtime/zero/stage3.py:4016-4052) for GPU and host memory; ``offload_param`` is read only by
  ZeRO-3 (runtime/zero/offload_config.py: "Valid only with stage 3");
* keys: the list shipped in ``preflight/data/deepspeed_config_keys.json``.

Hugging Face's ``"auto"``: the Trainer fills the keys of :data:`HF_FILLED` from its own arguments
(transformers ``integrations/deepspeed.py`` ``trainer_config_process``/``_finalize``, read at
02348331); Accelerate's ``DeepSpeedPlugin`` fills those of :data:`ACCELERATE_FILLED` (accelerate
16cb6eb ``utils/dataclasses.py`` ``plugin_to_config_mapping``, ``accelerator.py``
``_prepare_deepspeed``), and the Trainer hands its config to that plugin too (``TrainingArguments``
builds ``DeepSpeedPlugin(hf_ds_config=...)``), so both sets are filled under either. Neither fills
the legacy ``bfloat16`` section (they fill ``bf16.enabled``). DeepSpeed's pydantic sections drop
any other ``"auto"`` and use their default (runtime/config_utils.py
``DeepSpeedConfigModel.__init__``); a plain-dict key left ``"auto"`` reaches DeepSpeed as the string.

A pipeline-parallel job (``PipelineModule(num_stages=S)``) hands DeepSpeed its grid, whose
data-parallel world is ranks / S (runtime/pipe/module.py: "num_stages must divide distributed
world size"); the batch arithmetic uses that world.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from preflight.judge.cuda_runtime import GpuCapability
from preflight.judge.findings import Finding, findings_verdict, note, problem
from preflight.judge.memory_fit import FitPlan
from preflight.judge.sizing import STRATEGY_TITLES
from preflight.outcome import Metric, Status, Verdict, View
from preflight.parse.ds_config import AUTO, MISSING, DsConfig
from preflight.parse.ds_config_keys import KnownKeys
from preflight.parse.quantity import format_bytes

TB, MB, GA = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"

HF_FILLED: Mapping[str, str] = {
    MB: "--per_device_train_batch_size",
    GA: "--gradient_accumulation_steps",
    TB: "ranks x per-device batch x accumulation",
    "gradient_clipping": "--max_grad_norm",
    "optimizer.params.lr": "--learning_rate",
    "optimizer.params.betas": "--adam_beta1/--adam_beta2",
    "optimizer.params.eps": "--adam_epsilon",
    "optimizer.params.weight_decay": "--weight_decay",
    "scheduler.params.warmup_min_lr": "0",
    "scheduler.params.warmup_max_lr": "--learning_rate",
    "scheduler.params.warmup_num_steps": "--warmup_steps",
    "scheduler.params.total_num_steps": "the number of training steps",
    "fp16.enabled": "--fp16",
    "bf16.enabled": "--bf16",
    "zero_optimization.reduce_bucket_size": "hidden_size^2",
    "zero_optimization.stage3_prefetch_bucket_size": "0.9 x hidden_size^2",
    "zero_optimization.stage3_param_persistence_threshold": "10 x hidden_size",
}
"""Keys whose ``"auto"`` the Hugging Face Trainer fills, and from what."""

ACCELERATE_FILLED: Mapping[str, str] = {
    GA: "its gradient_accumulation_steps", "gradient_clipping": "its gradient_clipping",
    "zero_optimization.stage": "its zero_stage (2 unless ACCELERATE_DEEPSPEED_ZERO_STAGE says)",
    "zero_optimization.offload_optimizer.device": "its offload_optimizer_device (none by default)",
    "zero_optimization.offload_param.device": "its offload_param_device (none by default)",
    "zero_optimization.offload_optimizer.nvme_path": "its offload_optimizer_nvme_path",
    "zero_optimization.offload_param.nvme_path": "its offload_param_nvme_path",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "its zero3_save_16bit_model (false by default)",
    MB: "the prepared DataLoader's batch size", TB: "batch x accumulation x processes",
    "zero_optimization.reduce_bucket_size": "hidden_size^2",
    "zero_optimization.stage3_prefetch_bucket_size": "0.9 x hidden_size^2",
    "zero_optimization.stage3_param_persistence_threshold": "10 x hidden_size",
    "optimizer.params.lr": "DummyOptim's lr", "optimizer.params.weight_decay": "DummyOptim's weight_decay",
    "scheduler.params.warmup_min_lr": "0", "scheduler.params.warmup_max_lr": "the optimizer's lr",
    "scheduler.params.warmup_num_steps": "DummyScheduler's warmup_num_steps",
    "scheduler.params.total_num_steps": "DummyScheduler's total_num_steps",
    "fp16.enabled": "--mixed_precision", "bf16.enabled": "--mixed_precision",
}
"""Keys whose ``"auto"`` Accelerate's DeepSpeedPlugin fills (under ``accelerate launch`` and the HF Trainer)."""

ACCELERATE_ZERO_STAGE = 2
"""``DeepSpeedPlugin.zero_stage`` when nothing sets it (``ACCELERATE_DEEPSPEED_ZERO_STAGE``)."""


def filled_by(path: str) -> str | None:
    """Who fills an ``"auto"`` at ``path``: the HF Trainer, Accelerate, or None."""
    if path in HF_FILLED:
        return "the Hugging Face Trainer (and Accelerate)" if path in ACCELERATE_FILLED else \
            "the Hugging Face Trainer"
    if path in ACCELERATE_FILLED:
        return "Accelerate's DeepSpeedPlugin (also under the Hugging Face Trainer)"
    return None

BF16_MIN_CAPABILITY = (8, 0)
"""bf16 arithmetic in hardware: Ampere (sm_80) and newer; V100 (7.0) and T4 (7.5) lack it."""

STAGE_STRATEGY = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}
OFFLOAD_BUFFER_FACTOR = 1.5
"""``additional_buffer_factor`` of DeepSpeed's estimators."""

RANK_COUNTS = (1, 2, 4, 8)
"""Rank counts the batch table shows besides the job's own (the GPU counts of these nodes)."""


# ---------------------------------------------------------------------------------------------
# Batch arithmetic
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What DeepSpeed 0.19.8 computes for one world size, or the assertion it raises."""

    world_size: int
    train_batch: int | None
    micro_batch: int | None
    accumulation: int | None
    derived: tuple[str, ...]
    error: str | None

    @property
    def ok(self) -> bool:
        """True when DeepSpeed accepts the triple."""
        return self.error is None


def deepspeed_batch(train: int | None, micro: int | None, accumulation: int | None, world_size: int) -> BatchResult:
    """``_set_batch_related_parameters`` then ``_batch_assertion``, line for line (0.19.8)."""
    derived: list[str] = []
    if train is not None and micro is not None and accumulation is not None:
        pass
    elif train is not None and micro is not None:
        accumulation = train // micro // world_size
        derived.append(GA)
    elif train is not None and accumulation is not None:
        micro = train // world_size // accumulation
        derived.append(MB)
    elif micro is not None and accumulation is not None:
        train = micro * accumulation * world_size
        derived.append(TB)
    elif train is not None:
        accumulation, micro = 1, train // world_size
        derived += [GA, MB]
    elif micro is not None:
        train, accumulation = micro * world_size, 1
        derived += [TB, GA]
    else:
        return BatchResult(world_size, train, micro, accumulation, (),
                           "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided")
    assert train is not None and micro is not None and accumulation is not None
    error = None
    if train <= 0:
        error = f"Train batch size: {train} has to be greater than 0"
    elif micro <= 0:
        error = f"Micro batch size per gpu: {micro} has to be greater than 0"
    elif accumulation <= 0:
        error = f"Gradient accumulation steps: {accumulation} has to be greater than 0"
    elif train != micro * accumulation * world_size:
        error = (f"train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size "
                 f"{train} != {micro} * {accumulation} * {world_size}")
    return BatchResult(world_size, train, micro, accumulation, tuple(derived), error)


@dataclass(frozen=True, slots=True)
class JobWorld:
    """The job's rank count and where it came from (``8 visible GPUs``, ``--nproc 2``, ...)."""

    ranks: int
    how: str
    pipeline_stages: int | None = None
    """``PipelineModule(num_stages=...)`` of the script, when it is known; DeepSpeed's world is ranks / stages."""
    pipeline_from: str = ""


def _batch_number(config: DsConfig, key: str, findings: list[Finding]) -> int | None | str:
    """A batch value as DeepSpeed reads it: an int, None (not given), ``"auto"``, or ``"bad"``."""
    value = config.get(key)
    if value is MISSING or value is None:
        return None
    if value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        findings.append(problem(Status.FAIL, "DS_BATCH_NOT_A_NUMBER", key,
                                f"{value!r} is not a number; DeepSpeed compares it with 0 and fails",
                                f"Set {key} to a whole number (or \"auto\" under the Hugging Face Trainer)."))
        return "bad"
    if isinstance(value, float) and not value.is_integer():
        findings.append(problem(Status.FAIL, "DS_BATCH_NOT_WHOLE", key, f"{value} is not a whole number of samples",
                                f"Set {key} to a whole number."))
        return "bad"
    return int(value)


def _deepspeed_world(config: DsConfig, world: JobWorld, findings: list[Finding]) -> int | None:
    """The world size DeepSpeedConfig divides the batch by; None when the config makes it impossible."""
    stages = world.pipeline_stages
    if stages is not None and stages > 1:
        if world.ranks % stages:
            findings.append(problem(Status.FAIL, "DS_PIPELINE_SPLIT", "num_stages",
                                    f"{stages} pipeline stages ({world.pipeline_from}) do not divide the {world.ranks} "
                                    f"ranks ({world.how}): PipelineModule raises 'num_stages ({stages}) must divide "
                                    f"distributed world size ({world.ranks})'",
                                    f"Use a rank count that is a multiple of {stages}, or another stage count."))
            return None
        findings.append(note("DS_DATA_PARALLEL", "num_stages",
                             f"data-parallel world {world.ranks // stages} ({world.ranks} ranks / {stages} pipeline "
                             f"stages, {world.pipeline_from})"))
        return world.ranks // stages
    sp, dp = config.get("sequence_parallel_size"), config.get("data_parallel_size")
    if sp is not MISSING and dp is not MISSING:
        if not (isinstance(sp, int) and isinstance(dp, int)) or sp < 1 or dp < 1 or sp * dp != world.ranks:
            findings.append(problem(
                Status.FAIL, "DS_MESH_MISMATCH", "data_parallel_size",
                f"data_parallel_size {dp!r} x sequence_parallel_size {sp!r} must equal the {world.ranks} ranks "
                f"({world.how}); DeepSpeed builds its device mesh from them",
                f"Set data_parallel_size x sequence_parallel_size = {world.ranks}."))
            return None
        findings.append(note("DS_DATA_PARALLEL", "data_parallel_size",
                             f"data-parallel world {dp} (device mesh {dp} x {sp})"))
        return dp
    if sp is not MISSING:
        if not isinstance(sp, int) or sp < 1 or world.ranks % sp:
            findings.append(problem(
                Status.FAIL, "DS_SEQUENCE_PARALLEL_SPLIT", "sequence_parallel_size",
                f"{sp!r} does not divide the {world.ranks} ranks ({world.how}); DeepSpeed's world size would be "
                f"{world.ranks}/{sp}",
                "Use a sequence_parallel_size that divides the rank count."))
            return None
        findings.append(note("DS_DATA_PARALLEL", "sequence_parallel_size",
                             f"data-parallel world {world.ranks // sp} ({world.ranks} ranks / {sp})"))
        return world.ranks // sp
    return world.ranks


def judge_ds_batch(config: DsConfig, world: JobWorld) -> Verdict:
    """PASS with the effective batch, FAIL when DeepSpeed will refuse the batch triple at initialize."""
    findings: list[Finding] = []
    values = {key: _batch_number(config, key, findings) for key in (TB, MB, GA)}
    size = _deepspeed_world(config, world, findings)
    table: dict[str, Any] = {"columns": ["ranks", TB, MB, GA, "DeepSpeed"], "rows": []}
    details: dict[str, Any] = {"ranks": world.ranks, "ranks_from": world.how, "world_size": size,
                               "values": {k: config.get(k) if config.has(k) else None for k in (TB, MB, GA)}}
    if size is None or "bad" in values.values():
        return findings_verdict(findings, ok_summary="", subject=f"{config.source} batch", details=details)
    autos = [key for key, value in values.items() if value == AUTO]
    if autos:
        return _auto_batch(config, values, size, world, autos, findings, details)
    numbers: dict[str, int | None] = {k: v if isinstance(v, int) else None for k, v in values.items()}
    result = deepspeed_batch(numbers[TB], numbers[MB], numbers[GA], size)
    what_if = [deepspeed_batch(numbers[TB], numbers[MB], numbers[GA], n) for n in sorted({*RANK_COUNTS, size})]
    table["rows"] = [[r.world_size, r.train_batch, r.micro_batch, r.accumulation, "accepts" if r.ok else "refuses"]
                     for r in what_if]
    details["what_if"] = table
    what_if_view = View(kind="table", title="What DeepSpeed 0.19.8 computes for each rank count", data={
        **table, "highlight": [i for i, r in enumerate(what_if) if r.world_size == size]})
    details["deepspeed"] = {TB: result.train_batch, MB: result.micro_batch, GA: result.accumulation,
                            "derived": list(result.derived), "error": result.error}
    on = (f"on {size} ranks ({world.how})" if size == world.ranks
          else f"on a data-parallel world of {size} ({world.ranks} ranks, {world.how})")
    if not result.ok:
        findings.append(problem(Status.FAIL, "DS_BATCH_REFUSED", _batch_where(result, numbers),
                                f"DeepSpeed 0.19.8 refuses it at initialize {on}: {result.error}",
                                _batch_fix(numbers, size, what_if)))
        return findings_verdict(findings, ok_summary="", subject=f"{config.source} batch", details=details,
                                views=(what_if_view,))
    accepted = [str(r.world_size) for r in what_if if r.ok]
    if numbers[TB] is not None and numbers[MB] is not None and numbers[GA] is not None:
        findings.append(note("DS_BATCH_FIXED", TB, f"all three are fixed: DeepSpeed accepts them only on "
                             f"{'/'.join(accepted)} of {'/'.join(str(r.world_size) for r in what_if)} ranks"))
    for key in result.derived:
        findings.append(note("DS_BATCH_DERIVED", key, f"DeepSpeed computes {key} = {_derived_value(result, key)}"))
    assert result.train_batch is not None
    whose = f"({world.how})" if size == world.ranks else f"(data-parallel, of {world.ranks} ranks: {world.how})"
    summary = (f"effective batch {result.train_batch} = {result.micro_batch} per GPU x {result.accumulation} "
               f"accumulation steps x {size} ranks {whose}")
    metrics = [Metric("effective_batch", result.train_batch, "samples"),
               Metric("micro_batch_per_gpu", int(result.micro_batch or 0), "samples"),
               Metric("gradient_accumulation_steps", int(result.accumulation or 0))]
    return findings_verdict(findings, ok_summary=summary, subject=f"{config.source} batch", metrics=metrics,
                            details=details, views=(what_if_view,))


def _auto_batch(config: DsConfig, values: Mapping[str, int | None | str], size: int, world: JobWorld,
                autos: list[str], findings: list[Finding], details: dict[str, Any]) -> Verdict:
    """``"auto"``: the Hugging Face Trainer or Accelerate fills it (train_batch_size = ranks x micro x accumulation)."""
    findings.append(note("DS_AUTO", ", ".join(autos), '"auto", set by the Hugging Face Trainer (or Accelerate) from '
                         + ", ".join(HF_FILLED[key] for key in autos)
                         + ' (plain deepspeed.initialize refuses "auto" in the batch keys)'))
    micro, accumulation, train = values[MB], values[GA], values[TB]
    if isinstance(micro, int) and isinstance(accumulation, int):
        effective = micro * accumulation * size
        summary = (f"effective batch {effective} = {micro} per GPU x {accumulation} accumulation steps x {size} ranks "
                   f"({world.how}), train_batch_size filled by the Hugging Face Trainer or Accelerate")
        metrics = [Metric("effective_batch", effective, "samples")]
        return findings_verdict(findings, ok_summary=summary, subject=f"{config.source} batch", metrics=metrics,
                                details=details)
    if isinstance(train, int):
        findings.append(note("DS_BATCH_FIXED", TB, f"train_batch_size {train} is fixed: the Hugging Face Trainer "
                             f"refuses a run where {size} ranks x per-device batch x accumulation differs from it"))
    summary = (f"batch set by the Hugging Face Trainer or Accelerate: effective batch = per-device batch x "
               f"gradient accumulation x {size} ranks ({world.how})")
    return findings_verdict(findings, ok_summary=summary, subject=f"{config.source} batch", details=details)


def _derived_value(result: BatchResult, key: str) -> int | None:
    return {TB: result.train_batch, MB: result.micro_batch, GA: result.accumulation}[key]


def _batch_where(result: BatchResult, given: Mapping[str, int | None]) -> str:
    """The key path to blame: the derived value that came out 0, else train_batch_size."""
    for key in result.derived:
        value = _derived_value(result, key)
        if value is not None and value <= 0:
            return key
    if result.error and result.error.startswith("Either"):
        return MB
    return TB if given[TB] is not None else MB


def _batch_fix(given: Mapping[str, int | None], size: int, what_if: Sequence[BatchResult]) -> str:
    """How to make the triple consistent for ``size`` ranks."""
    micro, accumulation, train = given[MB], given[GA], given[TB]
    accepted = [str(r.world_size) for r in what_if if r.ok]
    elsewhere = f" (as written it works on {'/'.join(accepted)} ranks)" if accepted else ""
    if micro is None and train is None:
        return f"Set {MB} (and optionally {TB} = {MB} x {GA} x {size})."
    if micro is not None and accumulation is not None:
        return (f"Set {TB} to {micro * accumulation * size} (= {micro} x {accumulation} x {size}) or remove it so "
                f"DeepSpeed computes it{elsewhere}.")
    if train is not None and micro is not None:
        step = micro * size
        return (f"Make {TB} a multiple of {MB} x {size} ranks = {step}, e.g. {step * max(1, train // step)}, "
                f"or set {GA} and drop {TB}{elsewhere}.")
    if train is not None and accumulation is not None:
        return (f"Make {TB} a multiple of {GA} x {size} ranks = {accumulation * size}, or set {MB} and drop {TB}"
                f"{elsewhere}.")
    return f"Make {TB} a multiple of the {size} ranks, or set {MB} instead{elsewhere}."


# ---------------------------------------------------------------------------------------------
# Precision
# ---------------------------------------------------------------------------------------------


def _enabled(config: DsConfig, section: str) -> bool | str | None:
    """``section.enabled``: True/False, ``"auto"``, or None when the section is absent."""
    node = config.get(section)
    if section == "bf16" and node is MISSING:
        node = config.get("bfloat16")  # BFLOAT16_OLD, read only when "bf16" is absent
    if not isinstance(node, Mapping):
        return None
    value = node.get("enabled", False)
    return AUTO if value == AUTO else bool(value)


def judge_ds_precision(config: DsConfig, gpus: Sequence[GpuCapability] | None) -> Verdict:
    """FAIL for fp16 and bf16 both on, and for bf16 on a GPU below compute capability 8.0."""
    findings: list[Finding] = []
    bf16, fp16 = _enabled(config, "bf16"), _enabled(config, "fp16")
    bf16_key = "bf16.enabled" if config.has("bf16") or not config.has("bfloat16") else "bfloat16.enabled"
    autocast = config.get("torch_autocast")
    autocast_bf16 = (isinstance(autocast, Mapping) and autocast.get("enabled") is True
                     and str(autocast.get("dtype", "")).replace("torch.", "") in ("bfloat16", "bf16"))
    if bf16 is True and fp16 is True:
        findings.append(problem(Status.FAIL, "DS_PRECISION_BOTH", "fp16.enabled",
                                "fp16 and bf16 are both enabled: DeepSpeed asserts 'bfloat16 and fp16 modes cannot be "
                                "simultaneously enabled' at initialize",
                                "Enable one of them: bf16 on compute capability 8.0+ GPUs, fp16 otherwise."))
    legacy_auto = bf16 == AUTO and bf16_key == "bfloat16.enabled"
    if legacy_auto:
        findings.append(problem(Status.WARN, "DS_AUTO_DROPPED", bf16_key,
                                '"auto" in the legacy bfloat16 section: neither the Hugging Face Trainer nor '
                                "Accelerate fills it (they fill bf16.enabled), so DeepSpeed drops it and bf16 stays "
                                "off (fp32 costs about twice the memory and time of bf16)",
                                'Rename the section to "bf16": {"enabled": "auto"} (or true).'))
        bf16 = False
    for key, value in ((bf16_key, bf16), ("fp16.enabled", fp16)):
        if value == AUTO:
            flag = HF_FILLED[key]
            findings.append(note("DS_AUTO", key, f'"auto" (the Hugging Face Trainer sets it from {flag}, Accelerate '
                                 "from --mixed_precision; plain deepspeed.initialize drops it and leaves the mode "
                                 "off)"))
    wants_bf16 = [key for key, on in ((bf16_key, bf16 is True or bf16 == AUTO),
                                      ("torch_autocast.dtype", autocast_bf16)) if on]
    old = [g for g in gpus or () if g.capability < BF16_MIN_CAPABILITY]
    if wants_bf16 and old:
        names = ", ".join(f"GPU {g.index} ({g.name}, {g.capability[0]}.{g.capability[1]})" for g in old)
        status = Status.FAIL if bf16 is True or autocast_bf16 else Status.WARN
        findings.append(problem(status, "DS_BF16_UNSUPPORTED", wants_bf16[0],
                                f"bf16 asked of GPUs without bf16 hardware (compute capability below 8.0): {names}",
                                'Use fp16 with loss scaling ("fp16": {"enabled": true}, bf16 off) on these GPUs, or '
                                "rent GPUs of compute capability 8.0 or newer (A100, L4, L40S, H100)."))
    mode = "bf16" if bf16 is True else "fp16" if fp16 is True else (
        "set by the Trainer or Accelerate" if AUTO in (bf16, fp16) else "fp32")
    if gpus is None:
        where = "GPU compute capability unknown"
    elif not gpus:
        where = "no GPU visible to check it against"
    else:
        caps = sorted({f"{g.capability[0]}.{g.capability[1]}" for g in gpus})
        where = f"on {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} of compute capability {', '.join(caps)}"
    return findings_verdict(findings, ok_summary=f"precision {mode} {where}", subject=f"{config.source} precision",
                            details={"bf16": bf16, "fp16": fp16, "torch_autocast_bf16": autocast_bf16})


# ---------------------------------------------------------------------------------------------
# ZeRO stage, offload and the memory fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Host RAM the job may use and the pinned-memory limit (``ulimit -l``; None = unlimited)."""

    total_bytes: int | None
    available_bytes: int | None
    memlock_bytes: int | None
    memlock_known: bool = True


@dataclass(frozen=True, slots=True)
class PathSpace:
    """Free space at an NVMe offload path (``exists`` False when the directory is missing)."""

    path: str
    exists: bool
    free_bytes: int | None
    writable: bool | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class ZeroPlan:
    """The stage and offload devices the config asks for."""

    stage: int
    offload_optimizer: str
    offload_param: str
    pin_optimizer: bool
    pin_param: bool
    optimizer_nvme_path: str | None
    param_nvme_path: str | None


def zero_plan(config: DsConfig, findings: list[Finding] | None = None) -> ZeroPlan | None:
    """Stage and offload as DeepSpeed's ``DeepSpeedZeroConfig`` reads them; None for an invalid stage."""
    found = [] if findings is None else findings
    section = config.get("zero_optimization")
    if isinstance(section, bool):
        return ZeroPlan(1 if section else 0, "none", "none", True, True, None, None)  # deprecated form: stage 1
    if not isinstance(section, Mapping):
        return ZeroPlan(0, "none", "none", True, True, None, None)
    raw = section.get("stage", 0)
    if raw == AUTO:
        found.append(note("DS_AUTO", "zero_optimization.stage",
                          f'"auto": Accelerate\'s DeepSpeedPlugin fills it (under accelerate launch and the Hugging '
                          f"Face Trainer) from its zero_stage, {ACCELERATE_ZERO_STAGE} unless "
                          "ACCELERATE_DEEPSPEED_ZERO_STAGE says otherwise; judged as stage "
                          f"{ACCELERATE_ZERO_STAGE} (plain deepspeed.initialize would drop it and run stage 0)"))
        raw = ACCELERATE_ZERO_STAGE
    try:
        stage = int(raw)
    except (TypeError, ValueError):
        stage = -1
    if isinstance(raw, bool) or stage not in STAGE_STRATEGY or (isinstance(raw, float) and not raw.is_integer()):
        found.append(problem(Status.FAIL, "DS_ZERO_STAGE_INVALID", "zero_optimization.stage",
                             f"{raw!r} is not a ZeRO stage: DeepSpeed's ZeroStageEnum accepts 0, 1, 2 or 3",
                             "Set zero_optimization.stage to 0, 1, 2 or 3."))
        return None

    def device(key: str) -> tuple[str, bool, str | None]:
        node = section.get(key)
        if not isinstance(node, Mapping):
            return "none", True, None
        name = str(node.get("device", "none")).lower()
        path = node.get("nvme_path")
        return name, node.get("pin_memory", True) is not False, str(path) if path not in (None, AUTO) else None

    opt, pin_opt, opt_path = device("offload_optimizer")
    par, pin_par, par_path = device("offload_param")
    legacy = section.get("cpu_offload") is True
    if legacy and opt == "none":
        opt = "cpu"  # deprecated cpu_offload -> offload_optimizer.device = cpu
    if section.get("cpu_offload_param") is True and par == "none":
        par = "cpu"
    return ZeroPlan(stage, opt, par, pin_opt, pin_par, opt_path, par_path)


@dataclass(frozen=True, slots=True)
class OffloadNeed:
    """GPU bytes per rank and host bytes for the node, as DeepSpeed's estimators count them."""

    gpu_bytes: int
    host_bytes: int
    pinned_bytes: int
    nvme_bytes: int
    formula: str


def offload_need(plan: ZeroPlan, fit: FitPlan, ranks: int) -> OffloadNeed | None:
    """DeepSpeed's estimate with offload (None without offload), for the trained parameters of ``fit``.

    DeepSpeed's estimators count CPU offload; for ``nvme`` the offloaded state is counted on the
    drive instead (the split's fp32 master, optimizer state and gradients; 16-bit weights for
    parameters) and host RAM keeps only what stays on ``cpu``. LoRA: frozen base weights stay on
    the GPU (ZeRO-1/2) or move with ``offload_param`` (ZeRO-3); the estimators count the trained ones.
    """
    params_off = plan.stage == 3 and plan.offload_param != "none"
    if plan.stage == 0 or (plan.offload_optimizer == "none" and not params_off):
        return None
    lora = fit.lora
    trained = fit.params if lora is None else lora.trainable_params
    frozen = Fraction(0) if lora is None else lora.frozen_bytes * lora.frozen_params
    largest = fit.largest_layer_params
    factor = Fraction(OFFLOAD_BUFFER_FACTOR)
    split = fit.split
    if plan.offload_optimizer == "none":
        # ZeRO-3 parameter offload alone: the 16-bit weight shard leaves the GPU, the rest stays.
        zero3 = next(f.need for f in fit.strategies if f.need.name == "zero3")
        moved = (split.weights * trained + frozen) / ranks
        weights = split.weights * trained + frozen
        on_nvme = plan.offload_param == "nvme"
        host = Fraction(0) if on_nvme else weights * factor
        return OffloadNeed(math.ceil(zero3.bytes_per_gpu - moved), math.ceil(host), math.ceil(host / factor),
                           math.ceil(weights) if on_nvme else 0,
                           "ZeRO-3 per GPU minus the 16-bit weight shard; host 16-bit weights x 1.5")
    if plan.stage in (1, 2):
        gpu = Fraction(2 * trained) + frozen
        host = trained * max(4 * ranks, 16) * factor
        formula = ("GPU 2 x trained params (+ frozen base), host trained x max(4 x ranks, 16) x 1.5 "
                   "(runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs)")
        param_host = Fraction(0)
    elif params_off:
        gpu = Fraction(4 * largest)
        host = trained * 16 * factor
        param_host = (trained * 2 * factor + frozen) if plan.offload_param == "cpu" else Fraction(0)
        formula = ("GPU 4 x largest layer, host trained x 18 x 1.5 (+ frozen base) "
                   "(runtime/zero/stage3.py estimate_zero3_model_states_mem_needs, with zero.Init)")
    else:
        gpu = Fraction(4 * largest) + Fraction(2 * trained, ranks) + frozen / ranks
        host = trained * 16 * factor
        param_host = Fraction(0)
        formula = ("GPU 4 x largest layer + 2 x trained / ranks (+ frozen base / ranks), host trained x 16 x 1.5 "
                   "(runtime/zero/stage3.py estimate_zero3_model_states_mem_needs, with zero.Init)")
    nvme = Fraction(0)
    if plan.offload_optimizer == "nvme":
        nvme += (split.master + split.optimizer + split.gradients) * trained
        host = Fraction(0)
    if params_off and plan.offload_param == "nvme":
        nvme += split.weights * trained + frozen
    on_host = host + param_host
    return OffloadNeed(math.ceil(gpu), math.ceil(on_host), math.ceil(on_host / factor), math.ceil(nvme), formula)


def judge_ds_zero(
    config: DsConfig,
    *,
    fit: FitPlan | None,
    ranks: int,
    host: HostMemory,
    nvme: Mapping[str, PathSpace] | None = None,
    unfit_why: str = "it needs --model-params and a visible GPU",
) -> Verdict:
    """The config's ZeRO stage and offload against the memory fit, host RAM, ``ulimit -l`` and NVMe space.
    ``unfit_why`` says why there is no ``fit`` (issue 26: not "a visible GPU" while 8 are visible)."""
    findings: list[Finding] = []
    plan = zero_plan(config, findings)
    subject = f"{config.source} ZeRO"
    if plan is None:
        return findings_verdict(findings, ok_summary="", subject=subject)
    title = "no ZeRO (stage 0)" if plan.stage == 0 else f"ZeRO-{plan.stage}"
    _offload_placement(plan, findings)
    _nvme_paths(plan, nvme or {}, findings)
    details: dict[str, Any] = {"stage": plan.stage, "offload_optimizer": plan.offload_optimizer,
                               "offload_param": plan.offload_param}
    metrics: list[Metric] = []
    if fit is None:
        summary = f"{title}{_offload_text(plan)} (memory fit not checked: {unfit_why})"
        return findings_verdict(findings, ok_summary=summary, subject=subject, details=details)
    strategy = STAGE_STRATEGY[plan.stage]
    need = next(f for f in fit.strategies if f.need.name == strategy).need
    off = offload_need(plan, fit, ranks)
    gpu_bytes = need.bytes_per_gpu if off is None else off.gpu_bytes
    details.update(gpu_bytes_per_rank=gpu_bytes, usable_bytes_per_gpu=fit.available_bytes,
                   offload=None if off is None else {"gpu_bytes": off.gpu_bytes, "host_bytes": off.host_bytes,
                                                     "pinned_bytes": off.pinned_bytes, "nvme_bytes": off.nvme_bytes,
                                                     "formula": off.formula})
    metrics.append(Metric("zero_bytes_per_gpu", gpu_bytes, "B", labels={"stage": str(plan.stage)}))
    usable = format_bytes(fit.available_bytes)
    if gpu_bytes > fit.available_bytes:
        findings.append(problem(Status.FAIL, "DS_ZERO_DOES_NOT_FIT", "zero_optimization.stage",
                                f"{title}{_offload_text(plan)} needs {format_bytes(gpu_bytes)} of model state per GPU, "
                                f"{usable} usable on {fit.tightest.name or 'the tightest GPU'}",
                                _zero_fit_fix(plan, fit, ranks)))
    elif off is None and plan.stage < 3:
        order = list(STAGE_STRATEGY.values())
        lighter = [f.need.name for f in fit.strategies if f.fits and f.need.name in order
                   and order.index(f.need.name) < plan.stage]
        if lighter:
            findings.append(note("DS_ZERO_LIGHTER_FITS", "zero_optimization.stage",
                                 f"{STRATEGY_TITLES[lighter[0]]} also fits (less communication)"))
    if off is not None:
        _host_fit(plan, off, host, findings)
        _nvme_space(plan, off, nvme or {}, findings)
    summary = (f"{title}{_offload_text(plan)} fits: {format_bytes(gpu_bytes)} of model state per GPU, {usable} "
               f"usable per GPU on {ranks} ranks" + (f"; host {format_bytes(off.host_bytes)}" if off else ""))
    return findings_verdict(findings, ok_summary=summary, subject=subject, metrics=metrics, details=details)


def _offload_text(plan: ZeroPlan) -> str:
    parts = [f"{what} offload to {device}" for what, device in (("optimizer", plan.offload_optimizer),
                                                                 ("parameter", plan.offload_param)) if device != "none"]
    return f" with {' and '.join(parts)}" if parts else ""


def _offload_placement(plan: ZeroPlan, findings: list[Finding]) -> None:
    """Offload settings DeepSpeed accepts but does not use."""
    if plan.offload_param != "none" and plan.stage != 3:
        findings.append(problem(Status.WARN, "DS_OFFLOAD_IGNORED", "zero_optimization.offload_param",
                                f"offload_param is used only by ZeRO-3; with stage {plan.stage} DeepSpeed accepts it "
                                "and keeps the parameters on the GPU",
                                "Remove offload_param, or use zero_optimization.stage 3 to offload parameters."))
    if plan.offload_optimizer != "none" and plan.stage == 0:
        findings.append(problem(Status.WARN, "DS_OFFLOAD_IGNORED", "zero_optimization.offload_optimizer",
                                "optimizer offload needs ZeRO (stage 1, 2 or 3); with stage 0 nothing is offloaded",
                                "Set zero_optimization.stage to 1, 2 or 3, or remove offload_optimizer."))
    for key, device in (("offload_optimizer", plan.offload_optimizer), ("offload_param", plan.offload_param)):
        if device not in ("none", "cpu", "nvme"):
            findings.append(problem(Status.FAIL, "DS_OFFLOAD_DEVICE", f"zero_optimization.{key}.device",
                                    f"{device!r} is not an offload device (none, cpu, nvme); DeepSpeed refuses it",
                                    f'Set zero_optimization.{key}.device to "cpu" or "nvme".'))


def _nvme_paths(plan: ZeroPlan, spaces: Mapping[str, PathSpace], findings: list[Finding]) -> None:
    """``device: nvme`` needs an existing, writable ``nvme_path``."""
    for key, device, path in (("offload_optimizer", plan.offload_optimizer, plan.optimizer_nvme_path),
                              ("offload_param", plan.offload_param, plan.param_nvme_path)):
        if device != "nvme":
            continue
        where = f"zero_optimization.{key}.nvme_path"
        if path is None:
            findings.append(problem(Status.FAIL, "DS_NVME_PATH_MISSING", where,
                                    "NVMe offload without an nvme_path: DeepSpeed has nowhere to swap",
                                    f"Set {where} to a directory on a local NVMe drive."))
            continue
        space = spaces.get(path)
        if space is None:
            continue
        if not space.exists or space.writable is False:
            findings.append(problem(Status.FAIL, "DS_NVME_PATH_UNUSABLE", where,
                                    f"{path} {'does not exist' if not space.exists else 'is not writable'}"
                                    + (f" ({space.problem})" if space.problem else ""),
                                    f"Create {path} on a local NVMe drive and make it writable for the job."))


def _nvme_space(plan: ZeroPlan, off: OffloadNeed, spaces: Mapping[str, PathSpace], findings: list[Finding]) -> None:
    """The offloaded state must fit the NVMe path's free space."""
    paths = {p for p in (plan.optimizer_nvme_path if plan.offload_optimizer == "nvme" else None,
                         plan.param_nvme_path if plan.offload_param == "nvme" else None) if p}
    if not off.nvme_bytes or len(paths) != 1:
        return
    path = paths.pop()
    space = spaces.get(path)
    if space is None or space.free_bytes is None or not space.exists:
        return
    if off.nvme_bytes > space.free_bytes:
        findings.append(problem(Status.FAIL, "DS_NVME_SPACE", "zero_optimization.offload_optimizer.nvme_path",
                                f"NVMe offload needs about {format_bytes(off.nvme_bytes)} at {path}, "
                                f"{format_bytes(space.free_bytes)} is free",
                                f"Free space at {path} or point nvme_path at a larger drive."))


def _host_fit(plan: ZeroPlan, off: OffloadNeed, host: HostMemory, findings: list[Finding]) -> None:
    """Host RAM, pinned memory and NVMe space for the offloaded state."""
    key = "zero_optimization.offload_optimizer"
    if not off.host_bytes:
        return
    if host.total_bytes is not None and off.host_bytes > host.total_bytes:
        findings.append(problem(Status.FAIL, "DS_OFFLOAD_HOST_RAM", key,
                                f"offload needs about {format_bytes(off.host_bytes)} of host RAM, the job may use "
                                f"{format_bytes(host.total_bytes)} ({off.formula})",
                                "Offload to nvme instead of cpu, shard more (ZeRO-3), use more GPUs, or a host with "
                                "more RAM."))
    elif host.available_bytes is not None and off.host_bytes > host.available_bytes:
        findings.append(problem(Status.WARN, "DS_OFFLOAD_HOST_RAM_IN_USE", key,
                                f"offload needs about {format_bytes(off.host_bytes)} of host RAM, only "
                                f"{format_bytes(host.available_bytes)} is free now",
                                "Stop what holds host memory (page cache is reclaimed; other jobs are not)."))
    pinning = plan.pin_optimizer if plan.offload_optimizer == "cpu" else plan.pin_param
    if pinning and host.memlock_known and host.memlock_bytes is not None and off.pinned_bytes > host.memlock_bytes:
        findings.append(problem(Status.WARN, "DS_OFFLOAD_MEMLOCK", f"{key}.pin_memory",
                                f"pin_memory (default true) pins about {format_bytes(off.pinned_bytes)} of host "
                                f"memory; ulimit -l is {format_bytes(host.memlock_bytes)} (DeepSpeed's "
                                "offload_config.py: disable pinning on hosts with tight memlock limits)",
                                "Raise the limit (ulimit -l unlimited; docker run --ulimit memlock=-1) or set "
                                "pin_memory: false (slower transfers)."))


def _zero_fit_fix(plan: ZeroPlan, fit: FitPlan, ranks: int) -> str:
    """A stage that fits, or offload."""
    for name in ("zero1", "zero2", "zero3"):
        stage = list(STAGE_STRATEGY.values()).index(name)
        row = next(f for f in fit.strategies if f.need.name == name)
        if stage > plan.stage and row.fits:
            return (f'Use "stage": {stage} ({STRATEGY_TITLES[name]} needs {format_bytes(row.need.bytes_per_gpu)} '
                    "per GPU here).")
    if plan.offload_optimizer == "none":
        return ('Add "offload_optimizer": {"device": "cpu"} (ZeRO-Offload), use ZeRO-3 with parameter offload, '
                "or more GPUs.")
    if plan.stage < 3:
        return 'Use "stage": 3 with "offload_param": {"device": "cpu"}, or more GPUs.'
    needed = fit.gpus_needed
    more = f" (at least {needed[1]} such GPUs with {STRATEGY_TITLES[needed[0]]})" if needed else ""
    return f"Use more GPUs{more}, NVMe offload, or a smaller model."


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


def judge_ds_keys(config: DsConfig, known: KnownKeys, installed_version: str | None) -> Verdict:
    """Unknown, misspelt, removed and deprecated keys, and ``"auto"`` values nothing fills.

    A key a pydantic section rejects FAILs when this node's DeepSpeed is the version the key list
    describes; with another version (or none installed) it is a WARN that says which version rejects it.
    """
    findings: list[Finding] = []
    hf_auto: list[str] = []
    same = installed_version == known.deepspeed_version
    version = f"DeepSpeed {known.deepspeed_version}"
    installed = ("" if same else f"; this node has DeepSpeed {installed_version}" if installed_version
                 else "; DeepSpeed is not installed here")
    for path, value in config.items():
        parent, _, key = path.rpartition(".")
        if _inside_free_form(parent, known):
            continue
        section = known.section(parent)
        if path in known.removed:
            findings.append(problem(Status.FAIL if same else Status.WARN, "DS_KEY_REMOVED", path,
                                    f"{version} raises DeepSpeedConfigError: {known.removed[path]}{installed}",
                                    f"Remove {path} from the config."))
            continue
        if section is None:
            continue
        if key not in section.keys:
            findings.append(_unknown_key(path, key, section.keys, section.rejects_unknown, same, version, installed))
            continue
        if key in section.deprecated:
            new = section.deprecated[key]
            findings.append(note("DS_KEY_DEPRECATED", path, f"deprecated{f', use {new}' if new else ''}"))
        if value == AUTO:
            if filled_by(path) is not None:
                hf_auto.append(path)
            elif path != "bfloat16.enabled":  # judged by the precision check
                findings.append(_auto_value(path, section.rejects_unknown))
    if hf_auto:
        accelerate_only = [p for p in hf_auto if p not in HF_FILLED]
        also = (f" ({', '.join(accelerate_only)}: Accelerate's DeepSpeedPlugin, also under the Trainer)"
                if accelerate_only else "")
        findings.append(note("DS_AUTO", ", ".join(hf_auto), f'{len(hf_auto)} "auto" value'
                             f'{"s" if len(hf_auto) != 1 else ""} the Hugging Face Trainer or Accelerate fills{also}'))
    first = {"DS_KEY_REMOVED": 0, "DS_KEY_REJECTED": 1}  # what breaks initialize before what is ignored
    findings.sort(key=lambda f: first.get(f.code, 2))
    rejected = sum(1 for f in findings if f.code == "DS_KEY_REJECTED")
    ignored = sum(1 for f in findings if f.code == "DS_KEY_IGNORED")
    keys = sum(1 for _ in config.items())
    summary = f"{keys} keys, all known to {version}" if not (rejected or ignored) else ""
    return findings_verdict(findings, ok_summary=summary, subject=f"{config.source} keys",
                            details={"known_keys_version": known.deepspeed_version,
                                     "installed_deepspeed": installed_version})


def _inside_free_form(parent: str, known: KnownKeys) -> bool:
    """True below a section whose keys go unchecked to other code (``optimizer.params`` ...)."""
    return any(parent == free or parent.startswith(free + ".") for free in known.free_form)


def _unknown_key(path: str, key: str, keys: frozenset[str], rejects: bool, same: bool, version: str,
                 installed: str) -> Finding:
    nearest = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.6)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    fix = (f"Rename it to {nearest[0]!r}." if nearest else "Remove it (or check the key in DeepSpeed's config docs).")
    if rejects:
        return problem(Status.FAIL if same else Status.WARN, "DS_KEY_REJECTED", path,
                       f"unknown key: {version} refuses it at initialize (pydantic extra=forbid){hint}{installed}", fix)
    return problem(Status.WARN, "DS_KEY_IGNORED", path, f"unknown key: {version} ignores it silently{hint}", fix)


def _auto_value(path: str, in_model: bool) -> Finding:
    if in_model:
        return problem(Status.WARN, "DS_AUTO_DROPPED", path,
                       '"auto" is filled by neither the Hugging Face Trainer nor Accelerate: DeepSpeed drops it and '
                       "uses its default", f"Set {path} to the value you want.")
    return problem(Status.WARN, "DS_AUTO_UNFILLED", path,
                   '"auto" is filled by neither the Hugging Face Trainer nor Accelerate: DeepSpeed receives the string '
                   '"auto"', f"Set {path} to the value you want.")
