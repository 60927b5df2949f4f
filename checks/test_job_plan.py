"""The job's own plan, read before it runs: its DeepSpeed config, its launch command, its script."""

from __future__ import annotations

from preflight.job_plan import nvme_spaces
from preflight.judge.ds_config import judge_ds_batch, judge_ds_keys, judge_ds_precision, judge_ds_zero
from preflight.judge.launch_command import judge_launch_command
from preflight.judge.script_traps import judge_script_traps
from preflight.outcome import Verdict, skip
from preflight.parse.ds_config_keys import load_known_keys


def test_ds_config_batch(record, ds_config, ds_config_missing, plan_world):
    """The DeepSpeed config's batch arithmetic holds on the job's ranks"""
    record(ds_config_missing or judge_ds_batch(ds_config, plan_world))


def test_ds_config_precision(record, ds_config, ds_config_missing, plan_node):
    """The DeepSpeed config's precision runs on these GPUs"""
    record(ds_config_missing or judge_ds_precision(ds_config, plan_node.capabilities))


def test_ds_config_zero(record, ds_config, ds_config_missing, plan_fit, plan_world, plan_node):
    """The DeepSpeed config's ZeRO stage and offload fit this node"""
    record(ds_config_missing or judge_ds_zero(ds_config, fit=plan_fit, ranks=plan_world.ranks, host=plan_node.host,
                                              nvme=nvme_spaces(ds_config)))


def test_ds_config_keys(record, ds_config, ds_config_missing, plan_node):
    """Every key of the DeepSpeed config is one DeepSpeed reads"""
    record(ds_config_missing or judge_ds_keys(ds_config, load_known_keys(), plan_node.deepspeed_version))


def test_launch_command(record, launch_command, plan_node, launch_script):
    """The launch command starts the ranks this node can run"""
    record(skip("no launch command given: pass --launch \"torchrun --standalone --nproc-per-node=gpu train.py\"")
           if launch_command is None else judge_launch_command(launch_command, plan_node.launch_node(), launch_script))


def test_script_traps(record, script_scan):
    """The training script avoids the classic distributed traps"""
    record(script_scan if isinstance(script_scan, Verdict) else judge_script_traps(script_scan))
