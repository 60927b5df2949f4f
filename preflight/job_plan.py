"""The job's plan judged as a whole: the glue the ``job_plan`` checks and ``preflight rehearse`` share.

:class:`PlanNode` is every node fact the plan judges need, gathered once by
``preflight/fixtures/plan.py`` (the only place that reads the GPU and host fixtures for them).
:func:`rehearsal_plan_verdicts` is the hook for ``preflight rehearse``: given the user's script
and its arguments it finds the DeepSpeed config they name, scans the script for traps, and returns
one named verdict per question, ready to record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preflight.judge.cuda_runtime import GpuCapability
from preflight.judge.ds_config import (
    HostMemory,
    JobWorld,
    PathSpace,
    judge_ds_batch,
    judge_ds_keys,
    judge_ds_precision,
    judge_ds_zero,
    zero_plan,
)
from preflight.judge.launch_command import LaunchNode, ScriptFacts, launch_ranks
from preflight.judge.memory_fit import DEFAULT_HEADROOM, FitPlan, plan_memory_fit
from preflight.judge.script_traps import ScriptScan, judge_script_traps, scan_script
from preflight.judge.sizing import BytesPerParam, LoraSplit
from preflight.outcome import Verdict, fail, warn
from preflight.parse.ds_config import DsConfig, DsConfigError, read_ds_config
from preflight.parse.ds_config_keys import load_known_keys
from preflight.parse.launch_command import LaunchCommand
from preflight.parse.quantity import Headroom
from preflight.probe.gpu_memory import GpuMemory
from preflight.probe.host import probe_disk
from preflight.probe.job_plan import HostfileFacts, find_ds_config_arg, read_program, resolve


@dataclass(frozen=True, slots=True)
class PlanNode:
    """The node as the plan judges see it."""

    node_gpus: int
    """GPUs NVML lists on the node."""
    visible_gpus: int
    """GPUs the job sees from this shell (``CUDA_VISIBLE_DEVICES`` applied)."""
    visible_var: str | None
    capabilities: tuple[GpuCapability, ...] | None
    """Compute capability of each GPU the job sees; None when unknown."""
    memory: tuple[GpuMemory, ...]
    ranks: int
    ranks_how: str
    cpus: int | None
    host: HostMemory
    deepspeed_version: str | None
    torch_version: str | None = None

    def launch_node(self) -> LaunchNode:
        """The facts the launch-command judge takes."""
        return LaunchNode(self.node_gpus, self.visible_gpus, self.visible_var, self.cpus, self.torch_version)


@dataclass(frozen=True, slots=True)
class PlanVerdict:
    """One answer about the plan: a short name (``ds_config_batch``), a title and the verdict."""

    name: str
    title: str
    verdict: Verdict


def job_world(node: PlanNode, launch: LaunchCommand | None = None, hostfile: HostfileFacts | None = None,
              stages: tuple[int | None, str] = (None, ""), spawns: bool = False) -> JobWorld:
    """The job's ranks: what the launch command starts when it says, else the node's rank count; with the
    script's pipeline stages when it has them."""
    if launch is not None:
        ranks = launch_ranks(launch, node.launch_node(), hostfile, spawns)
        if ranks is not None:
            nproc = launch.option("nproc-per-node") or 1
            started = f" --nproc-per-node={nproc}" if launch.launcher == "torchrun" else ""
            return JobWorld(ranks, f"--launch: {launch.launcher}{started}", *stages)
    return JobWorld(node.ranks, node.ranks_how, *stages)


def pipeline_stages(scan: ScriptScan | Verdict, script_args: Sequence[str]) -> tuple[int | None, str]:
    """The script's ``PipelineModule(num_stages=...)``: a number, or its argparse option as the arguments set it."""
    if not isinstance(scan, ScriptScan) or scan.facts is None or scan.facts.pipeline is None:
        return None, ""
    pipeline = scan.facts.pipeline
    where = f"PipelineModule at {pipeline.where}"
    if pipeline.count is not None:
        return pipeline.count, where
    if pipeline.dest is None:
        return None, ""
    value = scan.facts.arguments.value(pipeline.dest, script_args)
    text = str(value) if value is not None else ""
    return (int(text), f"{where}, {pipeline.dest}={text}") if text.isdigit() else (None, "")


def fit_for(node: PlanNode, ranks: int, *, params: int | None, split: BytesPerParam | None = None,
            largest_layer_params: int | None = None, headroom: Headroom | None = None,
            lora: LoraSplit | None = None) -> FitPlan | None:
    """The memory fit on the job's ranks (one GPU each), None without a model size or GPUs."""
    if params is None or not node.memory:
        return None
    gpus = node.memory[:ranks] if 0 < ranks <= len(node.memory) else node.memory
    return plan_memory_fit(params=params, gpus=gpus, split=split, largest_layer_params=largest_layer_params,
                           headroom=headroom or DEFAULT_HEADROOM, lora=lora)


def unfit_why(node: PlanNode) -> str:
    """Why the memory fit was not made: no model size given, or no GPU whose memory NVML reports."""
    if node.memory:
        return f"it needs --model-params ({len(node.memory)} GPU(s) visible to size it on)"
    return "no GPU whose memory NVML reports is visible to the job"


def nvme_spaces(config: DsConfig) -> dict[str, PathSpace]:
    """Free space of each ``nvme_path`` the config offloads to (a probe: statvfs and a write test)."""
    plan = zero_plan(config)
    spaces: dict[str, PathSpace] = {}
    for path in {p for p in ((plan.optimizer_nvme_path, plan.param_nvme_path) if plan else ()) if p}:
        disk = probe_disk(path)
        spaces[path] = PathSpace(path, disk.exists, disk.free_bytes, disk.writable, disk.problem)
    return spaces


def ds_config_verdicts(config: DsConfig, node: PlanNode, world: JobWorld, fit: FitPlan | None) -> list[PlanVerdict]:
    """The four DeepSpeed-config questions."""
    return [
        PlanVerdict("ds_config_batch", "The DeepSpeed config's batch arithmetic holds on the job's ranks",
                    judge_ds_batch(config, world)),
        PlanVerdict("ds_config_precision", "The DeepSpeed config's precision runs on these GPUs",
                    judge_ds_precision(config, node.capabilities)),
        PlanVerdict("ds_config_zero", "The DeepSpeed config's ZeRO stage and offload fit this node",
                    judge_ds_zero(config, fit=fit, ranks=world.ranks, host=node.host, nvme=nvme_spaces(config),
                                  unfit_why=unfit_why(node))),
        PlanVerdict("ds_config_keys", "Every key of the DeepSpeed config is one DeepSpeed reads",
                    judge_ds_keys(config, load_known_keys(), node.deepspeed_version)),
    ]


def script_facts(path: str | None, scan: ScriptScan | Verdict, cwd: Path | None = None) -> ScriptFacts:
    """What the launch judge needs of the launched script: does it exist, resume, read --local-rank, spawn."""
    if path is None:
        return ScriptFacts(None, None, None)
    exists = resolve(path, cwd).is_file()
    if not isinstance(scan, ScriptScan) or scan.facts is None:
        return ScriptFacts(path, exists, None)
    facts = scan.facts
    return ScriptFacts(path, exists, scan.resumes, facts.arguments, str(facts.spawns) if facts.spawns else None)


def scan_script_file(path: str, cwd: Path | None = None) -> ScriptScan | Verdict:
    """The trap scan of a script file, or a WARN when it cannot be read (it was not checked)."""
    source = read_program(path, cwd)
    if source.text is None:
        return warn("SCRIPT_UNREADABLE", f"training script {source.path} {source.problem}: it was not scanned",
                    "Run preflight from the job's directory or give the script's full path (--script FILE).")
    return scan_script(source.text, path, source.neighbours)


def rehearsal_plan_verdicts(
    script: str,
    script_args: Sequence[str],
    *,
    node: PlanNode,
    ranks: int,
    fit: FitPlan | None = None,
    cwd: Path | None = None,
) -> list[PlanVerdict]:
    """The plan checks for ``preflight rehearse -- script args...`` on ``ranks`` ranks.

    The script is scanned for traps; a DeepSpeed config named in ``script_args``
    (``--deepspeed_config``, ``--deepspeed``, ``--ds-config`` ...) is judged for ``ranks`` ranks.
    """
    scan = scan_script_file(script, cwd)
    verdicts = [PlanVerdict("script_traps", "The training script avoids the classic distributed traps",
                            scan if isinstance(scan, Verdict) else judge_script_traps(scan))]
    named = find_ds_config_arg(script_args)
    if named is None:
        return verdicts
    try:
        config = read_ds_config(resolve(named, cwd))
    except DsConfigError as exc:
        return [*verdicts, PlanVerdict("ds_config", "The DeepSpeed config the script names can be read",
                                       fail("DS_CONFIG_UNREADABLE", str(exc),
                                            f"Fix or point the script's config argument at the real file ({named})."))]
    world = JobWorld(ranks, f"{ranks} rehearsal ranks", *pipeline_stages(scan, script_args))
    return [*verdicts, *ds_config_verdicts(config, node, world, fit)]
