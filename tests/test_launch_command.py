"""The launch command: torchrun / deepspeed / python parsing and the judge's findings."""

from __future__ import annotations

import pytest

from preflight.judge.launch_command import LaunchNode, ScriptFacts, judge_launch_command, launch_ranks
from preflight.outcome import Status, Verdict
from preflight.parse.launch_command import LaunchCommandError, parse_launch_command

EIGHT = LaunchNode(node_gpus=8, visible_gpus=8, visible_var=None, cpus=64)
NO_GPU = LaunchNode(node_gpus=0, visible_gpus=0, visible_var=None, cpus=2)
UNKNOWN = ScriptFacts(None, None, None)


def judge(text: str, node: LaunchNode = EIGHT, script: ScriptFacts = UNKNOWN) -> Verdict:
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


def test_no_rank_prefix_is_a_warning() -> None:
    verdict = judge("torchrun --standalone --nproc-per-node=gpu train.py")
    assert verdict.status is Status.WARN and verdict.code == "LAUNCH_NO_RANK_PREFIX"
    assert "--tee 3" in (verdict.remediation or "")
    assert judge("torchrun --nproc-per-node=gpu --redirects 3 --log-dir logs train.py").status is Status.PASS


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


def test_multi_node_without_standalone_is_a_warning() -> None:
    verdict = judge("torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=h:29400 --nproc-per-node=gpu -t3 t.py")
    assert verdict.code == "LAUNCH_MULTI_NODE"


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
    assert legacy.code == "LAUNCH_DEPRECATED_LAUNCHER"


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


def test_deepspeed_without_rank_logs_warns() -> None:
    assert judge("deepspeed t.py").code == "LAUNCH_NO_RANK_PREFIX"
