"""The NVML child process: all of a run's NVML work happens here, under the parent's deadline.

    python -m preflight.probe.nvml_child snapshot [--label L] [--library-factory M:F --library-argument A]
    python -m preflight.probe.nvml_child pcie --gpus 0,3 [--duration-s 20 --interval-s 0.5] [transport ...]

Each prints one JSON document on stdout (:meth:`NvmlSnapshot.to_json` or :meth:`PcieSample.to_json`)
and exits 0. A wedged driver can block an NVML call for ever (NVIDIA/open-gpu-kernel-modules#1333:
every NVML call hangs in D state; leptonai/gpud#117: nvidia-smi stuck after Xid 45), so the parent
(:mod:`preflight.probe.nvml_probe`) runs this in its own process group and kills it at the deadline.
``pcie --until-stdin-closes`` samples until its stdin reaches end of file (the parent closes it)
and then reports what it has; that needs no signal, so it cannot race the child's start-up.
"""

from __future__ import annotations

import argparse
import json
import select
import sys
import time
from collections.abc import Sequence
from typing import Any

from preflight.probe.nvml import PynvmlBackend
from preflight.probe.nvml_snapshot import NvmlSnapshot, PcieSample, SnapshotError
from preflight.probe.nvml_transport import REAL_LABEL, NvmlTransport
from preflight.probe.nvml_walk import sample_pcie, walk


def _failure(exc: BaseException) -> SnapshotError:
    return SnapshotError(
        "NVML_PROBE_FAILED",
        f"the NVML probe failed: {type(exc).__name__}: {exc}",
        "Run `nvidia-smi -q`; if it answers, report this preflight failure with the evidence.",
    )


def _gpu_list(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NVML indices like 0,3, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m preflight.probe.nvml_child")
    parser.add_argument("mode", choices=("snapshot", "pcie"))
    parser.add_argument("--label", default=REAL_LABEL)
    parser.add_argument("--library-factory", default=None)
    parser.add_argument("--library-argument", default="")
    parser.add_argument("--gpus", type=_gpu_list, default=[])
    parser.add_argument("--duration-s", type=float, default=0.0)
    parser.add_argument("--interval-s", type=float, default=0.5)
    parser.add_argument("--until-stdin-closes", action="store_true")
    return parser


def _stdin_closed_within(seconds: float) -> bool:
    """Wait up to ``seconds``; True as soon as stdin is at end of file (the parent wants the result)."""
    readable, _, _ = select.select([sys.stdin], [], [], seconds)
    return bool(readable) and sys.stdin.read(1) == ""


def run(argv: Sequence[str]) -> dict[str, Any]:
    """Do what ``argv`` asks and return the JSON document to print."""
    args = _parser().parse_args(argv)
    transport = NvmlTransport(args.library_factory, args.library_argument, args.label)
    started = time.monotonic()
    try:
        transport.install()
        if args.mode == "snapshot":
            return walk(PynvmlBackend(), transport.label).to_json()
        wait = _stdin_closed_within if args.until_stdin_closes else None
        return sample_pcie(PynvmlBackend(), args.gpus, args.duration_s, args.interval_s, wait=wait).to_json()
    except Exception as exc:  # noqa: BLE001 - the parent gets a typed error (TransportError included), never a traceback
        error = _failure(exc)
        duration = time.monotonic() - started
        if args.mode == "snapshot":
            return NvmlSnapshot(label=transport.label, error=error, duration_s=duration).to_json()
        return PcieSample(error=error, duration_s=duration).to_json()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: print the document, exit 0."""
    document = run(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
