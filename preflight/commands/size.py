"""``preflight size``: the memory-fit table without a node, for planning before renting.

Example: ``preflight size --model-params 70B --gpus 8 --gpu-memory 80GB``. LoRA/QLoRA:
``--trainable-params N`` or ``--lora-rank R --hidden-size H --num-layers L``, with ``--base-bits
16|8|4``; the LoRA table is printed beside full fine-tuning of the same model. Sizes follow
:mod:`preflight.parse.quantity` (``GB`` is 10**9 bytes, ``GiB`` 2**30) and the sizing model of
:mod:`preflight.judge.sizing` (18 bytes per parameter unless ``--bytes-per-param`` says otherwise).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from preflight.errors import UsageError
from preflight.judge.memory_fit import GpuMemory, plan_as_dict, plan_lines, plan_memory_fit
from preflight.judge.sizing import BASE_BITS, lora_split
from preflight.options import UsageParser, argparse_kwargs, argparse_type, join_negative_values
from preflight.parse.quantity import QuantityError, parse_memory_size
from preflight.settings import option_named

SHARED_OPTIONS: dict[str, str | None] = {
    "model-params": "model size: 7B, 7e9, 7000M, 1.5T, 350k",
    "bytes-per-param": "a total (16) or a split weights=2,master=4,optimizer=8,gradients=4 (default 18)",
    "largest-layer-params": "parameters of the largest layer gathered by ZeRO-3/FSDP (default: 10%% of the model, "
                            "at most 2.5B)",
    "headroom": "memory kept for activations: a percentage of each GPU (default 20%%) or a size",
    "trainable-params": "LoRA/partial fine-tuning: parameters trained (part of --model-params)",
    "lora-rank": None,
    "hidden-size": None,
    "num-layers": None,
    "lora-matrices": None,
    "base-bits": "storage of the frozen base weights: 16 (bf16), 8 (int8), 4 (QLoRA NF4); default 16",
}
"""The run's options ``preflight size`` takes too (the same converter and default; --base-bits keeps the choice list
of :data:`CHOICES`), each with the help that
fits planning without a node (None: the run's own)."""
CHOICES = {"base-bits": {"type": int, "choices": BASE_BITS, "metavar": None}}
"""Where ``preflight size`` keeps argparse's own choice list (its --help and its "invalid choice" message)."""
REQUIRED = ("model-params",)

MAX_GPUS = 65536
"""The largest job the table plans for (a 100k-GPU cluster is not one ZeRO group); the table holds one
entry per GPU, so ``--gpus 10000000`` once took over 1 GB."""


def _gpu_count(text: str) -> int:
    """A whole number of GPUs, 1 to :data:`MAX_GPUS` (the message names the GPU count)."""
    try:
        value = int(text) if len(text) <= 30 else int("x")
    except ValueError:
        raise ValueError(f"GPU count {text[:40]!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"GPU count must be at least 1, got {value}")
    if value > MAX_GPUS:
        raise ValueError(f"GPU count must be at most {MAX_GPUS} (one job's ranks), got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The options of ``preflight size``."""
    parser = UsageParser(
        prog="preflight size",
        description="Model-state memory per GPU for DDP, ZeRO-1/2/3 and FSDP, before activations.",
    )
    for name, help_text in SHARED_OPTIONS.items():
        option = option_named(name)
        option = dataclasses.replace(option, help=help_text or option.help)
        kwargs = {**argparse_kwargs(option), "default": option.default, **CHOICES.get(name, {})}
        parser.add_argument(f"--{name}", required=name in REQUIRED, **kwargs)
        if name == "model-params":  # the node's size follows the model's in --help
            parser.add_argument("--gpus", required=True, type=argparse_type(_gpu_count), metavar="N",
                                help="number of GPUs (ranks)")
            parser.add_argument("--gpu-memory", required=True, type=argparse_type(parse_memory_size),
                                metavar="SIZE", help="memory of one GPU: 80GB (10^9 bytes), 80GiB, 81559MiB")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: list[str]) -> int:
    """Print the per-strategy table (or JSON); bad sizes raise UsageError (exit code 2)."""
    parser = build_parser()
    value_options = [flag for action in parser._actions if action.nargs != 0 for flag in action.option_strings]
    args = parser.parse_args(join_negative_values(argv, value_options))
    gpus = [GpuMemory(index=i, name="", total_bytes=args.gpu_memory) for i in range(args.gpus)]
    lora_wanted = any(v is not None for v in (args.trainable_params, args.lora_rank, args.hidden_size, args.num_layers,
                                               args.lora_matrices, args.base_bits))
    try:
        lora = (
            lora_split(args.model_params, trainable_params=args.trainable_params, rank=args.lora_rank,
                       hidden_size=args.hidden_size, layers=args.num_layers, matrices=args.lora_matrices,
                       base_bits=args.base_bits or 16)
            if lora_wanted
            else None
        )
        full = plan_memory_fit(
            params=args.model_params,
            gpus=gpus,
            split=args.bytes_per_param,
            largest_layer_params=args.largest_layer_params,
            headroom=args.headroom,
        )
        plan = full if lora is None else plan_memory_fit(
            params=args.model_params, gpus=gpus, split=args.bytes_per_param,
            largest_layer_params=args.largest_layer_params, headroom=args.headroom, lora=lora,
        )
    except (QuantityError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        data = plan_as_dict(plan)
        if lora is not None:
            data["full_fine_tuning"] = plan_as_dict(full)
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        lines = plan_lines(plan, full=full if lora is not None else None)
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
