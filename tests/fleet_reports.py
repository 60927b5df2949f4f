"""Report dicts for the fleet tests, built by preflight's own code: the checks through the report
model, the node block by the node model (``Node.as_dict``) over a fake machine (the real NVML child
walking a fake NVML library, and the job's torch answered as a CUDA torch would on it). So ``merge``
is tested on the node sections preflight writes, not on a shape of the tests' own."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from preflight.outcome import Metric, RunVerdict, Verdict, fail, passed, warn
from preflight.report.model import CheckResult, RunRecord, build_report


PROFILE_OF = {"NVIDIA H100 80GB HBM3": "8x-h100-sxm", "NVIDIA A100-SXM4-80GB": "8x-a100-sxm"}
FAKE_PREFIX = "Fake "  # the fake profiles' names say they are fakes (tests/fakes/nvml_profiles.py)


@cache
def _node_block(gpu_name: str | None, gpus: int) -> str:
    """The node model's sections for a node with ``gpus`` GPUs of ``gpu_name`` (or none), as JSON text."""
    from preflight.node import Node
    from preflight.node.transports import Transports
    from tests.fakes.fake_torch import cuda_answer, real_answer, torch_runner
    from tests.fakes.nvml import fake_transport

    if gpu_name is None:
        transports = Transports(nvml=fake_transport("1x-a10g", init_error="LIBRARY_NOT_FOUND"),
                                run=torch_runner(real_answer), environ={})
    else:
        visible = ",".join(str(i) for i in range(gpus))
        transports = Transports(nvml=fake_transport(PROFILE_OF[gpu_name]), run=torch_runner(cuda_answer(gpus)),
                                environ={"CUDA_VISIBLE_DEVICES": visible})
    return json.dumps(Node(transports, nproc=None).as_dict())


def node_facts(host: str, gpu_name: str | None = None, gpus: int = 0) -> dict[str, Any]:
    """A node block as preflight writes it; the fake machine's GPU names without their ``Fake`` prefix."""
    block = json.loads(_node_block(gpu_name, gpus))
    for gpu in block["gpus"]["gpus"]:
        gpu["name"] = str(gpu["name"]).removeprefix(FAKE_PREFIX)
    return {"hostname": host, "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0", "architecture": "x86_64",
            "cpu": "Example CPU", "cpu_count": 64, "memory_bytes": 2**40, "python": "3.11.2", **block}


def make_report(host: str, checks: list[tuple[str, Verdict]], *, gpu_name: str | None = None, gpus: int = 0,
                profile: str = "quick", interrupted: str | None = None) -> dict[str, Any]:
    """A report's JSON as preflight writes it, with ``checks`` given as (name, verdict)."""
    record = RunRecord(argv=["preflight", "--profile", profile])
    for name, verdict in checks:
        nodeid = f"test_{name}.py::test_{name}"
        record.collected.append(nodeid)
        record.add(CheckResult(id=nodeid, name=f"test_{name}", title=f"{name} works", group=name, verdict=verdict,
                               duration_s=0.5))
    if interrupted:
        record.interrupted, record.interruption = True, interrupted
    run_verdict = RunVerdict(record.verdict().value)
    return build_report(record, node=node_facts(host, gpu_name, gpus), environment={},
                        options={"profile": profile}, exit_code=run_verdict.exit_code()).to_json()


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
