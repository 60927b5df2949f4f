"""The strategy phases of the rehearsal (``--strategy``): which strategies run, what each needs here,
and the phases and op build budget the plan gets for them.

The default is what needs nothing extra: DDP and FSDP2, plus ZeRO-1/2/3 when DeepSpeed is
installed (found through its package metadata; DeepSpeed is never imported in this process, only
inside the ranks that use it and the child that builds its ops). The hooks and fixtures that use
these live in :mod:`preflight.fixtures.strategies`.
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from preflight.judge.strategies import STRATEGIES, TITLES, ZERO_STRATEGIES, strategy_unavailable
from preflight.launch.phase_results import DdpResult, OpsResult, ZeroResult, parse_fsdp
from preflight.launch.plan import Phase
from preflight.node import Node
from preflight.node.torch import DEEPSPEED_TIMEOUT_S, read_job_deepspeed
from preflight.node.transports import Transports
from preflight.option_types import parse_strategies
from preflight.probe.deepspeed_ops import BackgroundOpBuild
from preflight.report.ownership import LOGS
from preflight.report.writer import PRIVATE_DIR_MODE
from preflight.settings import Settings
from preflight.stash import node_for
from preflight.waits import waiting

DDP_BUDGET_S = 60.0  # one step of a tiny model; the first NCCL collective on 8 GPUs takes seconds
STRATEGY_BUDGET_S = 120.0  # a few steps, a checkpoint save and load (DeepSpeed's ops are built before the launch)
QUICK_STEPS = 3
FULL_STEPS = 5
ENTRIES = {"ddp": "preflight.workers.ddp:run", "fsdp": "preflight.workers.fsdp:run",
           **{name: "preflight.workers.zero:run" for name in ZERO_STRATEGIES}}
OPS_PHASE = "deepspeed_ops"
OPS_ENTRY = "preflight.workers.zero:ops_phase"
CPU_INFO_FILE = "cpu-info.json"
OPS_LOAD_S = 60.0  # after the build: importing DeepSpeed and loading its ops in every rank
OP_BUILD_MARGIN_S = 5.0  # of the run's deadline, kept for writing the reports
OP_BUILD_KEY = pytest.StashKey[BackgroundOpBuild]()
DEEPSPEED_KEY = pytest.StashKey[tuple[str | None]]()


def job_deepspeed(transports: Transports) -> str | None:
    """The job's DeepSpeed version from package metadata (never imported), or None: this interpreter's
    when the job runs it (the same ``sys.path``), else a metadata-only question to the job's (``--python``)."""
    if transports.python != sys.executable:
        with waiting(f"the job's DeepSpeed (package metadata in {transports.python})",
                     time.monotonic() + DEEPSPEED_TIMEOUT_S):
            return read_job_deepspeed(transports)
    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None


def deepspeed_version(config: pytest.Config) -> str | None:
    """:func:`job_deepspeed`, asked once per run: plans are made while the launch starts, before the job's
    torch (which says the same) has answered."""
    if DEEPSPEED_KEY not in config.stash:
        config.stash[DEEPSPEED_KEY] = (job_deepspeed(node_for(config).transports),)
    return config.stash[DEEPSPEED_KEY][0]


def selected_strategies(chosen: Iterable[str] | None, deepspeed: str | None) -> tuple[str, ...]:
    """The strategies to rehearse, in a fixed order: the ones asked for (each value a name or a
    comma list), else the default."""
    if chosen:
        wanted = {name for value in chosen for name in parse_strategies(value)}
    else:
        wanted = {"ddp", "fsdp", *(ZERO_STRATEGIES if deepspeed else ())}
    return tuple(name for name in STRATEGIES if name in wanted)


@dataclass(frozen=True, slots=True)
class StrategySelection:
    """The strategies this run rehearses; ``"fsdp" in strategies`` works."""

    names: tuple[str, ...]
    explicit: bool

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def require(self, name: str) -> None:
        """Skip the calling check when ``name`` is not selected."""
        if name not in self.names:
            how = "--strategy" if self.explicit else "the default"
            pytest.skip(f"strategy {name} not selected ({how} selects {', '.join(self.names)}); "
                        f"add --strategy {name} to rehearse it")


def blocker(name: str, node: Node, deepspeed: str | None) -> str | None:
    """Why strategy ``name`` cannot be rehearsed on this node (the SKIP reason), or None. Asked when the
    launch is planned too, before the job's torch may have answered: its version is then not known,
    and a phase the checks later skip on it returns at once in the ranks (:mod:`preflight.workers.fsdp`)."""
    version = node.torch.version if node.torch_ready else None
    return strategy_unavailable(name, deepspeed_version=deepspeed, gpus=node.launch_job.cuda_devices,
                                torch_version=version)


def op_build_budget(settings: Settings) -> float:
    """``--op-build-timeout``, never past the run's deadline."""
    budget = settings.op_build_timeout_s
    return max(1.0, min(budget, settings.remaining_s() - OP_BUILD_MARGIN_S))


def ops_phase(budget_s: float, cpu_info: Path | None = None, build_lock: Path | None = None) -> Phase:
    """The phase that waits for the op build beside the launch (while it holds ``build_lock``), then loads
    the ops in every rank (with py-cpuinfo's answer the build left in ``cpu_info``)."""
    args: tuple[str, ...] = ("--cpu-info", str(cpu_info)) if cpu_info is not None else ()
    args += ("--build-lock", str(build_lock)) if build_lock is not None else ()
    return Phase(OPS_PHASE, OPS_ENTRY, args, budget_s=budget_s + OPS_LOAD_S, parse_output=OpsResult.parse)


def fresh_cpu_info_path(settings: Settings) -> Path:
    """This run's file for py-cpuinfo's answer (a previous run's, maybe from another machine, removed)."""
    logs = settings.report_dir / LOGS  # preflight's own folder (report/ownership.py)
    logs.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    path = logs / CPU_INFO_FILE
    path.unlink(missing_ok=True)
    return path


def strategy_phase(name: str, quick: bool) -> Phase:
    """The rehearsal phase of strategy ``name``: its worker, steps and checkpoint directory."""
    if name == "ddp":
        return Phase("ddp", ENTRIES["ddp"], budget_s=DDP_BUDGET_S, parse_output=DdpResult.parse)
    steps = QUICK_STEPS if quick else FULL_STEPS
    args = ["--steps", str(steps), "--checkpoint-dir", f"checkpoint-{name}"]
    if name in ZERO_STRATEGIES:
        args += ["--stage", name.removeprefix("zero")]
        return Phase(name, ENTRIES[name], tuple(args), budget_s=STRATEGY_BUDGET_S, parse_output=ZeroResult.parse)
    return Phase(name, ENTRIES[name], tuple(args), budget_s=STRATEGY_BUDGET_S, parse_output=parse_fsdp)


def quick_excluded(name: str, settings: Settings) -> str | None:
    """The quick profile rehearses DDP only (one launch, a short sweep); why ``name`` is left out."""
    if settings.quick and name != "ddp":
        return f"{TITLES[name]} is not rehearsed in the quick profile (one launch: DDP and a short sweep); " \
               "run --profile full"
    return None
