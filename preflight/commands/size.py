"""``preflight size``: the memory-fit table without a node, for planning before renting.

Example: ``preflight size --model-params 70B --gpus 8 --gpu-memory 80GB``. Sizes follow
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
from preflight.judge.sizing import parse_bytes_per_param
from preflight.parse.quantity import parse_headroom, parse_memory_size, parse_param_count

_VALUE_OPTIONS = (
    "--model-params", "--gpus", "--gpu-memory", "--bytes-per-param", "--largest-layer-params", "--headroom"
)


def _gpu_count(text: str) -> int:
    """A whole number of GPUs, at least one (the message names the GPU count)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"GPU count {text!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"GPU count must be at least 1, got {value}")
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
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: list[str]) -> int:
    """Print the per-strategy table (or JSON); bad sizes raise UsageError (exit code 2)."""
    args = build_parser().parse_args(join_negative_values(argv, _VALUE_OPTIONS))
    gpus = [GpuMemory(index=i, name="", total_bytes=args.gpu_memory) for i in range(args.gpus)]
    try:
        plan = plan_memory_fit(
            params=args.model_params,
            gpus=gpus,
            split=args.bytes_per_param,
            largest_layer_params=args.largest_layer_params,
            headroom=args.headroom,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        json.dump(plan_as_dict(plan), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n".join(plan_lines(plan)) + "\n")
    return 0
