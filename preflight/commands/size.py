"""``preflight size``: the memory-fit table without a node, for planning before renting.

Example: ``preflight size --model-params 70B --gpus 8 --gpu-memory 80GB``. LoRA/QLoRA:
``--trainable-params N`` or ``--lora-rank R --hidden-size H --num-layers L``, with ``--base-bits
16|8|4``; the LoRA table is printed beside full fine-tuning of the same model. Sizes follow
:mod:`preflight.parse.quantity` (``GB`` is 10**9 bytes, ``GiB`` 2**30) and the sizing model of
:mod:`preflight.judge.sizing` (18 bytes per parameter unless ``--bytes-per-param`` says otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys

from preflight.errors import UsageError
from preflight.options import UsageParser, argparse_type, join_negative_values
from preflight.judge.memory_fit import DEFAULT_HEADROOM, GpuMemory, plan_as_dict, plan_lines, plan_memory_fit
from preflight.judge.sizing import BASE_BITS, lora_split, parse_bytes_per_param
from preflight.options import positive_int
from preflight.parse.quantity import QuantityError, parse_headroom, parse_memory_size, parse_param_count

_VALUE_OPTIONS = (
    "--model-params", "--gpus", "--gpu-memory", "--bytes-per-param", "--largest-layer-params", "--headroom",
    "--trainable-params", "--lora-rank", "--hidden-size", "--num-layers", "--lora-matrices", "--base-bits",
)


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
    parser.add_argument("--model-params", required=True, type=argparse_type(parse_param_count), metavar="N",
                        help="model size: 7B, 7e9, 7000M, 1.5T, 350k")
    parser.add_argument("--gpus", required=True, type=argparse_type(_gpu_count), metavar="N",
                        help="number of GPUs (ranks)")
    parser.add_argument("--gpu-memory", required=True, type=argparse_type(parse_memory_size), metavar="SIZE",
                        help="memory of one GPU: 80GB (10^9 bytes), 80GiB, 81559MiB")
    parser.add_argument("--bytes-per-param", type=argparse_type(parse_bytes_per_param), default=None, metavar="SPEC",
                        help="a total (16) or a split weights=2,master=4,optimizer=8,gradients=4 (default 18)")
    parser.add_argument("--largest-layer-params", type=argparse_type(parse_param_count), default=None, metavar="N",
                        help="parameters of the largest layer gathered by ZeRO-3/FSDP "
                        "(default: 10%% of the model, at most 2.5B)")
    parser.add_argument("--headroom", type=argparse_type(parse_headroom), default=DEFAULT_HEADROOM, metavar="SIZE",
                        help="memory kept for activations: a percentage of each GPU (default 20%%) or a size")
    parser.add_argument("--trainable-params", type=argparse_type(parse_param_count), default=None, metavar="N",
                        help="LoRA/partial fine-tuning: parameters trained (part of --model-params)")
    parser.add_argument("--lora-rank", type=argparse_type(positive_int), default=None, metavar="R",
                        help="LoRA rank; with --hidden-size and --num-layers the adapter count follows")
    parser.add_argument("--hidden-size", type=argparse_type(positive_int), default=None, metavar="H",
                        help="the model's hidden size (for --lora-rank)")
    parser.add_argument("--num-layers", type=argparse_type(positive_int), default=None, metavar="L",
                        help="the model's layer count (for --lora-rank)")
    parser.add_argument("--lora-matrices", type=argparse_type(positive_int), default=None, metavar="M",
                        help="adapted hidden x hidden matrices per layer (default 2: q_proj, v_proj)")
    parser.add_argument("--base-bits", type=int, choices=BASE_BITS, default=None,
                        help="storage of the frozen base weights: 16 (bf16), 8 (int8), 4 (QLoRA NF4); default 16")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: list[str]) -> int:
    """Print the per-strategy table (or JSON); bad sizes raise UsageError (exit code 2)."""
    args = build_parser().parse_args(join_negative_values(argv, _VALUE_OPTIONS))
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
