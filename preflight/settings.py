"""Every option of a run, declared once, and the frozen :class:`Settings` they resolve into.

:data:`OPTIONS` feeds both the ``preflight`` command's parser (``--nproc``) and the pytest plugin's
(``--preflight-nproc``, for ``pytest checks/`` alone); a default is the option's, here and nowhere else.
The command parses once, builds the :class:`Settings` and hands them to the plugin; pytest alone builds
them from its own parse. Checks read typed fields (``settings.model_params``), never a name lookup.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.judge.memory_fit import DEFAULT_HEADROOM
from preflight.judge.sizing import BytesPerParam, LoraSplit, lora_split, parse_bytes_per_param
from preflight.option_types import ALL, base_bits, framework_name, launch_option, script_file, strategy_option
from preflight.options import Option, positive_float, positive_int, python_interpreter, rank_count, seconds
from preflight.parse.ds_config import DsConfig, read_ds_config
from preflight.parse.launch_command import LaunchCommand
from preflight.parse.quantity import Headroom, QuantityError, parse_headroom, parse_param_count
from preflight.probe.deepspeed_ops import DEFAULT_TIMEOUT_S as OP_BUILD_TIMEOUT_S
from preflight.probe.deepspeed_ops import EXTENSIONS_DIR_ENV
from preflight.probe.nvml_probe import NVML_TIMEOUT_S
from preflight.judge.strategies import STRATEGIES
from preflight.report.prometheus import prometheus_path

PROFILES = ("quick", "full")
JIT_BUILD_TIMEOUT_S = 600.0
RESERVE_FOR_REPORT_S = 5.0
"""Of the run's deadline, kept for writing the reports (the NVML deadline stops short of it)."""
LORA_FIELDS = ("trainable_params", "lora_rank", "hidden_size", "num_layers", "lora_matrices", "base_bits")

OPTIONS: tuple[Option, ...] = (
    # the run
    Option(name="report-dir", help="where preflight.json, preflight.html and logs are written (default ./reports)",
           type=str, default="reports", metavar="DIR"),
    Option(name="profile", help="quick: a short run that fits a scheduler's health-check budget; full (default): "
           "the complete sweep", choices=PROFILES, default="full"),
    Option(name="nproc", help="ranks for the distributed checks (default: the number of visible GPUs, or 2 "
           "without GPUs)", type=rank_count, metavar="N"),
    Option(name="expect-gpus", help="the number of GPUs this node must present (FAIL otherwise)",
           type=rank_count, metavar="N"),
    Option(name="timeout", help="overall deadline for the whole run in seconds (default 300)", type=seconds,
           default=300.0, metavar="SECONDS", attr="timeout_s"),
    Option(name="launch-timeout", help="longest any distributed phase (a DDP step, the sweep, an FSDP or ZeRO step) "
           "may run before it is called hung, in seconds, longer or shorter than its own budget (default: each "
           "phase's own; the whole run stays within --timeout)", type=seconds, metavar="SECONDS",
           attr="launch_timeout_s"),
    Option(name="strict", help="warnings make the exit code 1", flag=True, default=False),
    Option(name="cpu", help="a CPU rehearsal: run the distributed checks on CPU ranks (gloo) on a machine without "
           "NVIDIA GPUs (a laptop, CI); the verdict then says READY (CPU rehearsal)", flag=True, default=False),
    Option(name="python", help="the job's Python interpreter (default: the one preflight runs in): torch, DeepSpeed "
           "and numpy are judged there and every torchrun launch runs it, so preflight may live in a venv of its "
           "own", type=python_interpreter, default=sys.executable, metavar="PATH"),
    Option(name="slow", help="also run the opt-in slow checks (e.g. a DeepSpeed JIT build)", flag=True, default=False),
    # fleet output
    Option(name="prometheus", help="also write the verdict, each check's status and its metrics to FILE (a .prom "
           "file in node_exporter's --collector.textfile.directory), atomically", type=prometheus_path,
           metavar="FILE"),
    Option(name="oneline", help="end with one status line of at most 80 characters (e.g. 'NOT READY: "
           "DDP_RANK_HUNG (+2 more)'), for Slurm drain reasons and node-problem-detector", flag=True, default=False),
    # GPUs
    Option(name="nvml-timeout", help=f"deadline in seconds for all NVML queries of the run (default "
           f"{NVML_TIMEOUT_S:.0f}); a driver that does not answer in time is reported as NVML_TIMEOUT",
           type=seconds, default=NVML_TIMEOUT_S, metavar="SECONDS", attr="nvml_timeout_s"),
    # the host and the job's size
    Option(name="model-params", help="size the job: parameters of the model (7B, 7e9, 7000M, 1.5T); adds the "
           "memory-fit check and sizes the checkpoint", type=parse_param_count, metavar="N"),
    Option(name="bytes-per-param", help="bytes of model state per parameter: a total (16) or a split "
           "weights=2,master=4,optimizer=8,gradients=4 (default 18, mixed-precision Adam)",
           type=parse_bytes_per_param, default=BytesPerParam(), metavar="SPEC"),
    Option(name="largest-layer-params", help="parameters of the largest layer ZeRO-3/FSDP gathers (default: "
           "10%% of the model, at most 2.5B)", type=parse_param_count, metavar="N"),
    Option(name="headroom", help="GPU memory kept for activations: a percentage of each GPU or a size "
           "(default 20%%)", type=parse_headroom, default=DEFAULT_HEADROOM, metavar="SIZE"),
    Option(name="checkpoint-dir", help="where checkpoints will be written (default: the current directory)",
           type=str, metavar="DIR"),
    # NCCL
    Option(name="expect-busbw", help="expected peak all-reduce bus bandwidth in GB/s for this node (replaces the "
           "built-in reference table)", type=positive_float, metavar="GBPS"),
    # the job's plan
    Option(name="ds-config", help="the job's DeepSpeed config (JSON; Hugging Face \"auto\" values allowed): batch "
           "arithmetic on the job's ranks, precision, ZeRO stage and offload, unknown keys", type=read_ds_config,
           metavar="FILE"),
    Option(name="launch", help="the job's launch command, quoted: \"torchrun --standalone --nproc-per-node=gpu "
           "train.py ...\" or a deepspeed command; its script is scanned too", type=launch_option,
           metavar="CMD"),
    Option(name="script", help="the training script to scan for classic traps (read, never run)", type=script_file,
           metavar="FILE"),
    Option(name="trainable-params", help="LoRA/partial fine-tuning: parameters trained, part of --model-params; "
           "the memory fit counts the rest as frozen", type=parse_param_count, metavar="N"),
    Option(name="lora-rank", help="LoRA rank; with --hidden-size and --num-layers the adapter count follows",
           type=positive_int, metavar="R"),
    Option(name="hidden-size", help="the model's hidden size (for --lora-rank)", type=positive_int, metavar="H"),
    Option(name="num-layers", help="the model's layer count (for --lora-rank)", type=positive_int, metavar="L"),
    Option(name="lora-matrices", help="adapted hidden x hidden matrices per layer (default 2: q_proj, v_proj)",
           type=positive_int, metavar="M"),
    Option(name="base-bits", help="frozen base weights: 16 (bf16), 8 (int8), 4 (QLoRA NF4); default 16",
           type=base_bits, metavar="BITS"),
    # strategies
    Option(name="strategy", help="training strategies to rehearse with a tiny step and a checkpoint round trip: "
           f"{', '.join(STRATEGIES)} or {ALL}; repeat it or give a comma list (default: ddp and fsdp, plus "
           "zero1-3 when DeepSpeed is installed)", type=strategy_option, multiple=True, metavar="NAME[,NAME]",
           attr="strategies"),
    Option(name="op-build-timeout", help="budget in seconds for building the DeepSpeed ops the ZeRO rehearsal loads, "
           f"beside the rehearsal launch (default {OP_BUILD_TIMEOUT_S:.0f}; a first build takes minutes, later runs "
           f"reuse ~/.cache/preflight/torch_extensions, or ${EXTENSIONS_DIR_ENV})", type=seconds,
           default=OP_BUILD_TIMEOUT_S, metavar="SECONDS", attr="op_build_timeout_s"),
    # the CUDA toolkit
    Option(name="with", help="a framework the job will use (repeatable): 'deepspeed' makes a missing or mismatched "
           "CUDA toolkit, ninja or compiler a FAIL even before DeepSpeed is installed; 'cpp-extensions': the job "
           "JIT-builds torch C++/CUDA extensions (torch.utils.cpp_extension.load); without either (and without "
           "DeepSpeed installed) toolkit findings are informational", type=framework_name, multiple=True,
           metavar="NAME", attr="frameworks"),
    Option(name="jit-build-timeout", help="deadline in seconds for the opt-in DeepSpeed JIT build check (default "
           "600; needs --slow)", type=seconds, default=JIT_BUILD_TIMEOUT_S, metavar="SECONDS",
           attr="jit_build_timeout_s"),
    # topology
    Option(name="expect-nvlinks", help="active NVLinks every GPU must have (18 on H100/H200/B200 SXM, 12 on A100 "
           "SXM); default: as many as the best GPU of the node", type=positive_int, metavar="N"),
)
"""Every option of a run, in ``--help`` order within each group (see ``preflight.cli.OPTION_GROUPS``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the user asked for (one typed field per option of :data:`OPTIONS`), plus the run's clock."""

    report_dir: Path
    profile: str
    nproc: int | None
    expect_gpus: int | None
    timeout_s: float
    launch_timeout_s: float | None
    strict: bool
    cpu: bool
    python: str
    slow: bool
    prometheus: Path | None
    oneline: bool
    nvml_timeout_s: float
    model_params: int | None
    bytes_per_param: BytesPerParam
    largest_layer_params: int | None
    headroom: Headroom
    checkpoint_dir: str | None
    expect_busbw: float | None
    ds_config: DsConfig | None
    launch: LaunchCommand | None
    script: str | None
    trainable_params: int | None
    lora_rank: int | None
    hidden_size: int | None
    num_layers: int | None
    lora_matrices: int | None
    base_bits: int | None
    strategies: tuple[str, ...]
    """``--strategy`` as given (each value one name or a comma list); empty: the default selection."""
    op_build_timeout_s: float
    frameworks: tuple[str, ...]
    """``--with``: the frameworks the job will use."""
    jit_build_timeout_s: float
    expect_nvlinks: int | None
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def from_options(cls, values: Mapping[str, object], started: float | None = None) -> Settings:
        """From option ``dest`` -> parsed value (what argparse leaves); an option absent or None takes its
        default. A LoRA combination that says nothing raises :class:`QuantityError` (a usage error)."""
        fields: dict[str, Any] = {}
        for option in OPTIONS:
            value = values.get(option.dest)
            if option.multiple:
                value = tuple(value) if isinstance(value, (list, tuple)) else ()
            fields[option.attribute] = option.default if value is None else value
        fields["report_dir"] = Path(str(fields["report_dir"])).resolve()
        settings = cls(**fields, started=time.monotonic() if started is None else started)
        settings.lora()  # refused now, before anything runs
        return settings

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (``settings.with_(started=now)``)."""
        return dataclasses.replace(self, **changes)

    def as_options(self) -> dict[str, object]:
        """Every option by its ``dest`` with the value this run uses (the report's ``run.options``)."""
        return {option.dest: getattr(self, option.attribute) for option in OPTIONS}

    @property
    def quick(self) -> bool:
        """True for the quick profile."""
        return self.profile == "quick"

    def lora(self) -> LoraSplit | None:
        """The LoRA/QLoRA split the options ask for, None for full fine-tuning; raises QuantityError for a
        combination that does not say what is trained."""
        if all(getattr(self, name) is None for name in LORA_FIELDS):
            return None
        if self.model_params is None:
            raise QuantityError("the LoRA/QLoRA options size a model: give --model-params too")
        return lora_split(self.model_params, trainable_params=self.trainable_params, rank=self.lora_rank,
                          hidden_size=self.hidden_size, layers=self.num_layers, matrices=self.lora_matrices,
                          base_bits=self.base_bits or 16)

    def remaining_s(self) -> float:
        """Seconds left before the overall deadline."""
        return self.timeout_s - (time.monotonic() - self.started)

    def phase_budget_s(self, own_s: float) -> float:
        """How long a distributed phase whose own budget is ``own_s`` may run before it is hung:
        ``--launch-timeout`` when given (longer or shorter than ``own_s``, as --help says), else ``own_s``."""
        return self.launch_timeout_s if self.launch_timeout_s is not None else own_s

    def nvml_deadline_s(self) -> float:
        """``--nvml-timeout``, capped by what is left of the run's ``--timeout``."""
        return max(1.0, min(self.nvml_timeout_s, self.remaining_s() - RESERVE_FOR_REPORT_S))


def option_named(name: str) -> Option:
    """The declaration of ``--name`` (``preflight size`` takes some of the run's options)."""
    return next(option for option in OPTIONS if option.name == name)
