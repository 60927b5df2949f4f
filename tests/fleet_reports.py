"""Building real report dicts (through the report model) for the fleet tests: one node's
checks, metrics and GPUs, without running anything."""

from __future__ import annotations

from typing import Any

from preflight.outcome import Metric, Verdict, fail, passed, warn
from preflight.report.model import CheckResult, RunRecord, build_report


def node_facts(host: str, gpu_name: str | None = None, gpus: int = 0) -> dict[str, Any]:
    facts: dict[str, Any] = {"hostname": host, "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0",
                             "cpu": "Example CPU", "cpu_count": 64, "memory_bytes": 2**40, "python": "3.11.2",
                             "torch": {"version": "2.13.0", "cuda": "12.8", "cuda_build": True, "distributed": True,
                                       "nccl": "2.27.3", "device_count": gpus}}
    if gpu_name is not None:
        facts["gpus"] = {"backend": "pynvml", "driver_version": "570.86.15", "cuda_driver_version": "12.8", "error": None,
                         "gpus": [{"index": i, "name": gpu_name} for i in range(gpus)]}
    return facts


def make_report(host: str, checks: list[tuple[str, Verdict]], *, gpu_name: str | None = None, gpus: int = 0,
                profile: str = "quick", interrupted: str | None = None) -> dict[str, Any]:
    """A report as preflight writes it, with ``checks`` given as (name, verdict)."""
    record = RunRecord(argv=["preflight", "--profile", profile])
    for name, verdict in checks:
        nodeid = f"test_{name}.py::test_{name}"
        record.collected.append(nodeid)
        record.add(CheckResult(id=nodeid, name=f"test_{name}", title=f"{name} works", group=name, verdict=verdict,
                               duration_s=0.5))
    if interrupted:
        record.interrupted, record.interruption = True, interrupted
    verdict = record.verdict().value
    return build_report(record, node=node_facts(host, gpu_name, gpus), environment={},
                        options={"profile": profile}, exit_code=1 if verdict == "NOT READY" else 0)


def busbw_check(value: float, run: str = "p2p", **more_runs: float) -> tuple[str, Verdict]:
    """An NCCL bandwidth check that passed with ``value`` GB/s peak (and other runs' peaks)."""
    peaks = {run: value, **more_runs}
    return ("nccl_bandwidth", passed(f"all_reduce busbw peak {value} GB/s",
                                     metrics=tuple(Metric("busbw_peak", v, "GB/s", {"run": r}) for r, v in peaks.items())))


def ddp_check(step_s: float = 0.02) -> tuple[str, Verdict]:
    return ("ddp_step", passed("identical parameters on 8 ranks",
                               metrics=(Metric("step_time_max", step_s, "s"), Metric("ranks", 8))))


def hung_ddp() -> tuple[str, Verdict]:
    return ("ddp_step", fail("DDP_RANK_HUNG", "ddp: rank 3 hung in all_reduce (rank 3 got the least far)",
                             "Re-run with NCCL_DEBUG=INFO"))


def slow_p2p() -> tuple[str, Verdict]:
    return ("nccl_p2p", warn("NCCL_P2P_SLOW", "P2P bandwidth gpu0-gpu1 is 12 GB/s, expected 40", "Check ACS"))
