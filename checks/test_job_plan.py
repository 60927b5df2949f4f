"""The job's own plan, read before it runs: its DeepSpeed config, its launch command, its script."""

from __future__ import annotations

from preflight.job_plan import PlanNode, nvme_spaces
from preflight.judge.ds_config import JobWorld, judge_ds_batch, judge_ds_keys, judge_ds_precision, judge_ds_zero
from preflight.judge.launch_command import LaunchFacts, judge_launch_command
from preflight.judge.memory_fit import FitPlan
from preflight.judge.script_traps import ScriptScan, judge_script_traps
from preflight.outcome import Verdict, skip
from preflight.parse.ds_config import DsConfig
from preflight.parse.ds_config_keys import load_known_keys
from preflight.parse.launch_command import LaunchCommand
from preflight.recording import Recorder

NO_LAUNCH = "no launch command given: pass --launch \"torchrun --standalone --nproc-per-node=gpu train.py\""


def test_ds_config_batch(record: Recorder, ds_config: DsConfig | Verdict, plan_world: JobWorld) -> None:
    """Does the DeepSpeed config's batch arithmetic hold on the job's ranks?"""
    record(ds_config if isinstance(ds_config, Verdict) else judge_ds_batch(ds_config, plan_world))


def test_ds_config_precision(record: Recorder, ds_config_after: DsConfig | Verdict, plan_node: PlanNode) -> None:
    """Does the DeepSpeed config's precision run on these GPUs?"""
    record(ds_config_after if isinstance(ds_config_after, Verdict)
           else judge_ds_precision(ds_config_after, plan_node.capabilities))


def test_ds_config_zero(record: Recorder, ds_config_after: DsConfig | Verdict, plan_fit: FitPlan | None,
                        plan_world: JobWorld, plan_node: PlanNode) -> None:
    """Do the DeepSpeed config's ZeRO stage and offload fit this node?"""
    record(ds_config_after if isinstance(ds_config_after, Verdict) else judge_ds_zero(
        ds_config_after, fit=plan_fit, ranks=plan_world.ranks, host=plan_node.host, nvme=nvme_spaces(ds_config_after)))


def test_ds_config_keys(record: Recorder, ds_config_after: DsConfig | Verdict, plan_node: PlanNode) -> None:
    """Is every key of the DeepSpeed config one DeepSpeed reads?"""
    record(ds_config_after if isinstance(ds_config_after, Verdict) else judge_ds_keys(
        ds_config_after, load_known_keys(), plan_node.deepspeed_version))


def test_launch_command(record: Recorder, launch_command: LaunchCommand | None, plan_node: PlanNode,
                        launch_facts: LaunchFacts) -> None:
    """Does the launch command start the ranks this node can run?"""
    record(skip(NO_LAUNCH) if launch_command is None
           else judge_launch_command(launch_command, plan_node.launch_node(), launch_facts))


def test_script_traps(record: Recorder, script_scan: ScriptScan | Verdict) -> None:
    """Does the training script avoid the classic distributed traps?"""
    record(script_scan if isinstance(script_scan, Verdict) else judge_script_traps(script_scan))
