"""The launch command: torchrun / deepspeed / python parsing and the judge's findings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from preflight.judge.launch_command import LaunchFacts, LaunchNode, ScriptFacts, judge_launch_command, launch_ranks
from preflight.judge.script_traps.facts import ArgFacts, Argument, Where
from preflight.outcome import Status, Verdict
from preflight.parse.launch_command import LaunchCommandError, parse_launch_command
from preflight.probe.command import run_command
from preflight.probe.job_plan import HostfileFacts, ModuleLookup, find_module, read_hostfile

EIGHT = LaunchNode(node_gpus=8, visible_gpus=8, visible_var=None, cpus=64)
NO_GPU = LaunchNode(node_gpus=0, visible_gpus=0, visible_var=None, cpus=2)
UNKNOWN = ScriptFacts(None, None, None)


def judge(text: str, node: LaunchNode = EIGHT, script: ScriptFacts | LaunchFacts = UNKNOWN) -> Verdict:
    return judge_launch_command(parse_launch_command(text), node, script)


def codes(verdict: Verdict) -> set[str]:
    return {f["code"] for f in verdict.details["findings"]}


# --- parsing ---------------------------------------------------------------------------------------


def test_torchrun_spellings_and_the_script_arguments() -> None:
    command = parse_launch_command(
        "OMP_NUM_THREADS=4 nohup torchrun --standalone --nproc_per_node=8 -t 3 --max-restarts 2 "
        "train.py --config cfg.yaml --nproc-per-node 99"
    )
    assert command.launcher == "torchrun" and command.env == {"OMP_NUM_THREADS": "4"}
    assert command.option("nproc-per-node") == "8" and command.option("tee") == "3"
    assert command.option("standalone") is True and command.option("max-restarts") == "2"
    assert command.script == "train.py" and command.script_args == ("--config", "cfg.yaml", "--nproc-per-node", "99")


def test_python_module_forms() -> None:
    run = parse_launch_command("python3 -u -m torch.distributed.run --nproc-per-node gpu train.py")
    assert run.launcher == "torchrun" and run.option("nproc-per-node") == "gpu" and not run.legacy_launch
    legacy = parse_launch_command("python -m torch.distributed.launch --use_env --nproc_per_node 2 train.py")
    assert legacy.legacy_launch and legacy.option("use-env") is True
    module = parse_launch_command("torchrun -m mypkg.train --lr 3e-4")
    assert module.runs_module and module.script == "mypkg.train"
    plain = parse_launch_command("python train.py --epochs 3")
    assert plain.launcher == "python" and plain.script == "train.py"


def test_deepspeed_runner_options() -> None:
    command = parse_launch_command("deepspeed --include localhost:0,1 --master_port 29600 train.py --deepspeed ds.json")
    assert command.launcher == "deepspeed" and command.option("include") == "localhost:0,1"
    assert command.script_args == ("--deepspeed", "ds.json")
    assert parse_launch_command("deepspeed --num_accelerators 2 t.py").option("num_gpus") == "2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("torchrun 'train.py", "does not parse as a shell line"),
        ("", "empty"),
        ("accelerate launch train.py", "preflight reads torchrun"),
        ("torchrun --nproc-per-node", "expects a value"),
        ("torchrun --standalone", "no training script"),
        ("torchrun --bogus 1 train.py", "unrecognized option --bogus"),
        ("torchrun --standalone=yes train.py", "takes no value"),
        ("deepspeed --include", "expects a value"),
        ("python -m", "needs a module name"),
    ],
)
def test_commands_that_do_not_parse(text: str, message: str) -> None:
    with pytest.raises(LaunchCommandError, match=message):
        parse_launch_command(text)


def test_unique_prefix_is_the_option() -> None:
    assert parse_launch_command("torchrun --nproc 2 --stand train.py").option("nproc-per-node") == "2"


# --- torchrun ----------------------------------------------------------------------------------------


def test_seed_command_with_tee_passes() -> None:
    verdict = judge("torchrun --standalone --nproc-per-node=gpu --tee 3 train.py")
    assert verdict.status is Status.PASS and "8 ranks on 8 visible GPUs" in verdict.summary


def test_no_rank_prefix_is_a_pass_note_with_the_tip() -> None:
    verdict = judge("torchrun --standalone --nproc-per-node=gpu train.py")
    assert verdict.status is Status.PASS and verdict.code is None and "LAUNCH_NO_RANK_PREFIX" in codes(verdict)
    assert "tip: --tee 3" in verdict.summary
    assert "LAUNCH_NO_RANK_PREFIX" not in codes(judge("torchrun --nproc-per-node=gpu --redirects 3 train.py"))


def test_more_ranks_than_visible_gpus() -> None:
    verdict = judge("torchrun --standalone --nproc-per-node=16 -t 3 train.py")
    assert verdict.status is Status.FAIL and verdict.code == "LAUNCH_NPROC_ABOVE_GPUS"
    masked = LaunchNode(node_gpus=8, visible_gpus=2, visible_var="0,1", cpus=64)
    assert judge("torchrun --nproc-per-node=4 -t3 train.py", masked).code == "LAUNCH_NPROC_ABOVE_GPUS"
    in_command = judge("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node=4 -t3 train.py")
    assert in_command.code == "LAUNCH_NPROC_ABOVE_GPUS" and "LAUNCH_VISIBLE_IN_COMMAND" in codes(in_command)


def test_gpu_without_cuda_and_auto_without_gpu() -> None:
    assert judge("torchrun --nproc-per-node=gpu train.py", NO_GPU).code == "LAUNCH_NPROC_GPU_NO_CUDA"
    auto = judge("torchrun --nproc-per-node=auto -t 3 train.py", NO_GPU)
    assert auto.code == "LAUNCH_NPROC_AUTO_CPUS" and launch_ranks(parse_launch_command(
        "torchrun --nproc-per-node=auto train.py"), NO_GPU) == 2
    assert judge("torchrun --nproc-per-node=2 -t 3 train.py", NO_GPU).status is Status.PASS
    assert judge("torchrun --nproc-per-node=tpu train.py").code == "LAUNCH_NPROC_INVALID"


def test_default_nproc_uses_one_gpu_of_eight() -> None:
    assert judge("torchrun --standalone train.py").code == "LAUNCH_ONE_RANK"
    assert judge("python train.py").code == "LAUNCH_ONE_RANK"
    one = LaunchNode(node_gpus=1, visible_gpus=1, visible_var=None)
    assert judge("torchrun --standalone train.py", one).status is Status.PASS


@pytest.mark.parametrize(
    ("nnodes", "status", "code"),
    [("2", Status.FAIL, "LAUNCH_STANDALONE_MULTINODE"), ("1:2", Status.WARN, "LAUNCH_STANDALONE_MULTINODE"),
     ("a", Status.FAIL, "LAUNCH_NNODES_INVALID"), ("3:1", Status.FAIL, "LAUNCH_NNODES_INVALID"),
     ("1", Status.PASS, None)],
)
def test_nnodes_with_standalone(nnodes: str, status: Status, code: str | None) -> None:
    verdict = judge(f"torchrun --standalone --nnodes={nnodes} --nproc-per-node=gpu -t 3 train.py")
    assert verdict.status is status and verdict.code == code


def test_multi_node_without_standalone_is_a_note() -> None:
    verdict = judge("torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=h:29400 --nproc-per-node=gpu -t3 t.py")
    assert verdict.status is Status.PASS and "LAUNCH_MULTI_NODE" in codes(verdict)


def test_restarts_need_a_script_that_resumes() -> None:
    command = "torchrun --standalone --nproc-per-node=gpu --max-restarts=3 -t 3 train.py"
    no_resume = judge(command, script=ScriptFacts("train.py", True, False))
    assert no_resume.code == "LAUNCH_RESTARTS_WITHOUT_RESUME" and "step 0" in no_resume.summary
    assert judge(command, script=ScriptFacts("train.py", True, True)).status is Status.PASS
    unknown = judge(command)
    assert unknown.status is Status.PASS and "LAUNCH_RESTARTS_UNCHECKED" in codes(unknown)
    assert judge("torchrun --max-restarts=-1 --nproc-per-node=gpu -t3 t.py").code == "LAUNCH_RESTARTS_INVALID"


def test_missing_script_and_deprecated_launcher() -> None:
    verdict = judge("torchrun --nproc-per-node=gpu -t 3 nope.py", script=ScriptFacts("nope.py", False, None))
    assert verdict.code == "LAUNCH_SCRIPT_MISSING" and verdict.status is Status.WARN
    legacy = judge("python -m torch.distributed.launch --nproc_per_node 8 -t 3 train.py")
    assert legacy.status is Status.PASS and "LAUNCH_DEPRECATED_LAUNCHER" in codes(legacy)


# --- deepspeed -----------------------------------------------------------------------------------------


def test_deepspeed_include_within_the_node() -> None:
    verdict = judge("deepspeed --include localhost:0,1 --enable_each_rank_log logs train.py")
    assert verdict.status is Status.PASS and "2 ranks" in verdict.summary
    assert launch_ranks(parse_launch_command("deepspeed --exclude localhost:0 t.py"), EIGHT) == 7
    assert launch_ranks(parse_launch_command("deepspeed t.py"), EIGHT) == 8


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("deepspeed --include localhost:8 t.py", "LAUNCH_DS_FILTER_SLOT"),
        ("deepspeed --include worker-0:0 t.py", "LAUNCH_DS_FILTER_HOST"),
        ("deepspeed --include localhost:0 --exclude localhost:1 t.py", "LAUNCH_DS_FILTER_CONFLICT"),
        ("deepspeed --include localhost:0 --num_gpus 1 t.py", "LAUNCH_DS_FILTER_CONFLICT"),
        ("deepspeed --num_gpus 16 t.py", "LAUNCH_DS_NUM_GPUS"),
        ("deepspeed --num_nodes 2 t.py", "LAUNCH_DS_NO_HOSTFILE"),
        ("CUDA_VISIBLE_DEVICES=GPU-8e7b2c1a deepspeed t.py", "LAUNCH_DS_FILTER_SLOT"),
    ],
)
def test_deepspeed_runner_refusals(text: str, code: str) -> None:
    verdict = judge(text)
    assert verdict.status is Status.FAIL and verdict.code == code


def test_deepspeed_ignores_visible_devices_when_a_filter_is_given() -> None:
    masked = LaunchNode(node_gpus=8, visible_gpus=2, visible_var="4,5", cpus=64)
    verdict = judge("deepspeed --num_gpus 2 --enable_each_rank_log logs t.py", masked)
    assert verdict.code == "LAUNCH_DS_IGNORES_VISIBLE" and verdict.status is Status.WARN
    follows = judge("deepspeed --enable_each_rank_log logs t.py", masked)
    assert follows.status is Status.PASS and "2 ranks" in follows.summary


def test_deepspeed_without_rank_logs_is_a_note() -> None:
    verdict = judge("deepspeed t.py")
    assert verdict.status is Status.PASS and "LAUNCH_NO_RANK_PREFIX" in codes(verdict)


# --- what the launcher hands the script: --local-rank, -m MODULE, ports, mp.spawn -----------------------

ONLY_UNDERSCORE = ArgFacts("argparse", Where("run_glue_no_trainer.py", 191),
                           (Argument(("--local_rank",), "local_rank", -1), Argument(("--seed",), "seed", None)))
BOTH = ArgFacts("argparse", Where("t.py", 9), (Argument(("--local-rank", "--local_rank"), "local_rank", -1),))
ONLY_DASH = ArgFacts("argparse", Where("t.py", 9), (Argument(("--local-rank",), "local_rank", -1),))
KNOWN_ARGS = ArgFacts("tolerant", Where("t.py", 9), (Argument(("--local_rank",), "local_rank", -1),))
TORCH2 = LaunchNode(node_gpus=8, visible_gpus=8, visible_var=None, cpus=64, torch_version="2.13.0")


def with_args(arguments: ArgFacts) -> ScriptFacts:
    return ScriptFacts("run_glue_no_trainer.py", True, True, arguments)


def test_legacy_launcher_passes_dashed_local_rank_that_an_underscore_only_argparse_refuses() -> None:
    # DeepSpeedExamples compression/bert/bash_script/XTC/quant_1bit.sh launches run_glue_no_trainer.py this way
    line = "python -m torch.distributed.launch --nproc_per_node=1 --master_port 29500 run_glue_no_trainer.py --seed 42"
    verdict = judge(line, TORCH2, with_args(ONLY_UNDERSCORE))
    assert verdict.status is Status.FAIL and verdict.code == "LAUNCH_LOCAL_RANK_REFUSED"
    assert "unrecognized arguments: --local-rank=0" in verdict.summary and "torch 2.13.0" in verdict.summary
    torch1 = LaunchNode(node_gpus=8, visible_gpus=8, visible_var=None, cpus=64, torch_version="1.13.1")
    assert judge(line, torch1, with_args(ONLY_UNDERSCORE)).status is Status.PASS
    assert judge(line.replace("launch ", "launch --use_env "), TORCH2, with_args(ONLY_UNDERSCORE)).status is Status.PASS
    assert judge(line, TORCH2, with_args(BOTH)).status is Status.PASS
    assert judge(line, TORCH2, with_args(KNOWN_ARGS)).status is Status.PASS
    assert judge(line.replace("python -m torch.distributed.launch", "torchrun"), TORCH2,
                 with_args(ONLY_UNDERSCORE)).status is Status.PASS


def test_deepspeed_passes_underscored_local_rank() -> None:
    verdict = judge("deepspeed --enable_each_rank_log logs t.py", TORCH2, with_args(ONLY_DASH))
    assert verdict.code == "LAUNCH_LOCAL_RANK_REFUSED" and "--local_rank=0" in verdict.summary
    assert judge("deepspeed --no_local_rank t.py", TORCH2, with_args(ONLY_DASH)).code is None
    assert judge("deepspeed t.py", TORCH2, with_args(ONLY_UNDERSCORE)).code is None


def test_a_module_that_does_not_exist_never_starts() -> None:
    # huggingface/transformers docs/source/en/deepspeed.md (multi-node, torchrun tab)
    line = ("python -m torch.run --nproc_per_node=8 --nnode=2 --node_rank=0 --master_addr=hostname1 "
            "--master_port=9901 your_program.py --deepspeed ds_config.json")
    missing = ModuleLookup("torch.run", "missing", "torch.run")
    verdict = judge(line, TORCH2, LaunchFacts(UNKNOWN, missing))
    assert verdict.status is Status.FAIL and verdict.code == "LAUNCH_MODULE_MISSING"
    assert "No module named torch.run" in verdict.summary and "torch.distributed.run" in verdict.summary
    elsewhere = judge("python -m mypkg.train", TORCH2, LaunchFacts(UNKNOWN, ModuleLookup("mypkg.train", "missing",
                                                                                          "mypkg")))
    assert elsewhere.status is Status.WARN and elsewhere.code == "LAUNCH_MODULE_NOT_FOUND"
    package = judge("python -m torch.distributed", TORCH2,
                    LaunchFacts(UNKNOWN, ModuleLookup("torch.distributed", "no-main", "torch.distributed")))
    assert package.code == "LAUNCH_MODULE_MISSING" and "without __main__" in package.summary


def test_the_module_probe_asks_the_job_interpreter_without_importing() -> None:
    environ = dict(os.environ)
    assert find_module("torch.run", python=sys.executable, run=run_command, environ=environ).state == "missing"
    found = find_module("torch.distributed.run", python=sys.executable, run=run_command, environ=environ)
    assert found.state == "found" and found.detail.endswith("run.py")
    assert find_module("os.path", python=sys.executable, run=run_command, environ=environ).state == "not-a-package"


def test_a_port_out_of_range_never_listens() -> None:
    verdict = judge("python -m torch.distributed.launch --nproc_per_node=1 --master_port 66664 t.py")
    assert verdict.status is Status.FAIL and verdict.code == "LAUNCH_PORT_INVALID"
    assert judge("deepspeed --master_port 70000 t.py").code == "LAUNCH_PORT_INVALID"
    assert judge("torchrun --rdzv-endpoint=localhost:0 --nproc-per-node=gpu -t 3 t.py").status is Status.PASS


def test_a_script_that_spawns_its_ranks_is_not_one_rank() -> None:
    # pytorch/examples imagenet/main.py: python main.py --multiprocessing-distributed (mp.spawn at line 131)
    spawning = ScriptFacts("main.py", True, True, None, "main.py:131")
    verdict = judge("python main.py -a resnet50 --multiprocessing-distributed --world-size 1 --rank 0", script=spawning)
    assert verdict.status is Status.PASS and "LAUNCH_SCRIPT_SPAWNS" in codes(verdict)


# --- deepspeed hostfiles -----------------------------------------------------------------------------------


def hostfile(text: str | None, path: str = "hostfile") -> HostfileFacts:
    return HostfileFacts(path, True, text is not None, text)


MULTI = "deepspeed --num_gpus 8 --num_nodes 2 --hostfile hostfile --master_addr hostname1 --master_port=9901 t.py"


def test_hostfile_with_the_nodes_asked_is_a_multi_node_note() -> None:
    verdict = judge(MULTI, TORCH2, LaunchFacts(UNKNOWN, None, hostfile("hostname1 slots=8\nhostname2 slots=8\n")))
    assert verdict.status is Status.PASS and "LAUNCH_DS_HOSTFILE" in codes(verdict)


def test_hostfile_missing_for_two_nodes_never_starts() -> None:
    verdict = judge(MULTI, TORCH2, LaunchFacts(UNKNOWN, None, hostfile(None)))
    assert verdict.status is Status.FAIL and verdict.code == "LAUNCH_DS_NO_HOSTFILE"
    assert "Num nodes is >1 but no extra nodes available via hostfile" in verdict.summary
    one = judge("deepspeed --hostfile hostfile t.py", TORCH2, LaunchFacts(UNKNOWN, None, hostfile(None)))
    assert one.status is Status.WARN and one.code == "LAUNCH_DS_HOSTFILE_MISSING"


def test_hostfile_listing_no_other_node_runs_half_the_job() -> None:
    verdict = judge(MULTI, TORCH2, LaunchFacts(UNKNOWN, None, hostfile("# this node\nhostname1 slots=8\n")))
    assert verdict.status is Status.WARN and verdict.code == "LAUNCH_DS_FEWER_NODES"
    assert "runs on 1 without a word, not 2" in verdict.summary
    assert launch_ranks(parse_launch_command(MULTI), EIGHT, hostfile("hostname1 slots=8")) == 8


@pytest.mark.parametrize(
    ("text", "code"),
    [("hostname1 gpus=8", "LAUNCH_DS_HOSTFILE_INVALID"), ("h slots=8\nh slots=8", "LAUNCH_DS_HOSTFILE_INVALID"),
     ("# nothing\n", "LAUNCH_DS_HOSTFILE_INVALID"), ("localhost slots=16", "LAUNCH_DS_HOSTFILE_SLOTS")],
)
def test_hostfiles_the_runner_refuses(text: str, code: str) -> None:
    verdict = judge("deepspeed --hostfile hostfile t.py", TORCH2, LaunchFacts(UNKNOWN, None, hostfile(text)))
    assert verdict.status is Status.FAIL and verdict.code == code


def test_include_names_a_host_of_the_hostfile() -> None:
    facts = LaunchFacts(UNKNOWN, None, hostfile("worker-0 slots=8\nworker-1 slots=8"))
    assert judge("deepspeed --hostfile hostfile --include worker-1:0,1 t.py", TORCH2, facts).status is Status.PASS
    bad = judge("deepspeed --hostfile hostfile --include worker-2 t.py", TORCH2, facts)
    assert bad.code == "LAUNCH_DS_FILTER_HOST" and "the hostfile lists worker-0, worker-1" in bad.summary


def test_hostfile_probe_reads_the_file_deepspeed_reads(tmp_path: Path) -> None:
    (tmp_path / "hostfile").write_text("worker-0 slots=8\n")
    given = read_hostfile("hostfile", tmp_path)
    assert given.given and given.exists and given.text == "worker-0 slots=8\n"
    missing = read_hostfile("nope", tmp_path)
    assert missing.given and not missing.exists and missing.text is None
    default = read_hostfile(None, tmp_path)
    assert not default.given and default.path == "/job/hostfile"
