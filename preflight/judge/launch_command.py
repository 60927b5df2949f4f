"""The job's launch command judged against the GPUs it will see, before it runs.

torchrun (torch 2.13 ``torch/distributed/run.py``): ``determine_local_world_size`` turns
``--nproc-per-node`` into a rank count (an integer; ``gpu`` = ``torch.cuda.device_count()``, a
``ValueError("Cuda is not available.")`` without CUDA; ``auto`` = the accelerators, else one rank
per CPU; ``cpu`` = one per CPU); ``parse_min_max_nnodes`` reads ``--nnodes`` as ``N`` or
``MIN:MAX``; ``--standalone`` starts a rendezvous on ``localhost:0`` that no other node can join.
The default ``--nproc-per-node`` is 1 and the default ``--tee``/``--redirects`` 0 (worker output
reaches the console unprefixed, interleaved across ranks).

DeepSpeed's runner: :mod:`preflight.judge.launch_deepspeed` (its hostfile, filters and counts).

What the launcher hands the script: ``torch.distributed.launch`` (torch 2.0 and later,
``run.py`` ``config_from_args``) appends ``--local-rank=N`` unless ``--use-env`` (torch 1.x wrote
``--local_rank``); DeepSpeed's ``launcher/launch.py`` appends ``--local_rank=N`` unless
``--no_local_rank``; torchrun appends nothing. A script whose argparse ``parse_args()`` does not
declare that spelling exits with "unrecognized arguments" on every rank. ``python -m MODULE``
needs the module in the job's interpreter (``python -m torch.run`` is "No module named torch.run").
A tip that costs nothing (a rank prefix on the console, the deprecated launcher that still works,
a multi-node line judged on one node) is a PASS note.
"""

from __future__ import annotations

from dataclasses import dataclass

from preflight.judge.findings import Finding, findings_verdict, note, problem
from preflight.judge.launch_deepspeed import deepspeed_slots
from preflight.judge.script_traps import ArgFacts
from preflight.outcome import Metric, Status, Verdict
from preflight.parse.launch_command import LaunchCommand
from preflight.probe.job_plan import HostfileFacts, ModuleLookup

VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class LaunchNode:
    """What the launch depends on: GPUs NVML lists, GPUs the job's shell sees, its mask, CPUs."""

    node_gpus: int
    visible_gpus: int
    visible_var: str | None
    cpus: int | None = None
    torch_version: str | None = None
    """The job's torch (``2.13.0``): which spelling torch.distributed.launch passes."""


@dataclass(frozen=True, slots=True)
class ScriptFacts:
    """What is known about the launched script: does it exist, does it resume, how it reads its arguments."""

    path: str | None
    exists: bool | None
    resumes: bool | None
    arguments: ArgFacts | None = None
    spawns: str | None = None
    """``train.py:104`` when the script starts its own processes (``mp.spawn``, ``fabric.launch``)."""


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    """What the launch depends on besides the node: the script, the ``-m`` module, the DeepSpeed hostfile."""

    script: ScriptFacts = ScriptFacts(None, None, None)
    module: ModuleLookup | None = None
    hostfile: HostfileFacts | None = None


LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def command_visible(command: LaunchCommand, node: LaunchNode) -> tuple[int, str | None]:
    """GPUs the job sees and the mask in force: a ``CUDA_VISIBLE_DEVICES=`` word in the command wins."""
    if VISIBLE not in command.env:
        return node.visible_gpus, node.visible_var
    mask = command.env[VISIBLE]
    count = 0
    for item in (part.strip() for part in mask.split(",")):
        if not item:
            break
        if item.isdigit():
            if int(item) >= node.node_gpus:
                break  # CUDA stops at the first entry it cannot resolve
        elif not item.startswith(("GPU-", "MIG-")):
            break
        count += 1
    return count, mask


def launch_ranks(command: LaunchCommand, node: LaunchNode, hostfile: HostfileFacts | None = None,
                 spawns: bool = False) -> int | None:
    """Ranks on this node the command starts; None when the launcher (or a script that spawns its own ranks)
    decides at run time, or the launch fails."""
    visible, mask = command_visible(command, node)
    if command.launcher == "python":
        return None if spawns else 1
    if command.launcher == "torchrun":
        value = str(command.option("nproc-per-node") or "1")
        if value.lstrip("-").isdigit():
            return int(value) if int(value) > 0 else None
        if value == "gpu":
            return visible or None
        if value == "auto":
            return visible or node.cpus
        if value == "cpu":
            return node.cpus
        return None
    slots = deepspeed_slots(command, node.node_gpus, visible, mask, hostfile, [])
    return len(slots) if slots else None


def judge_launch_command(command: LaunchCommand, node: LaunchNode, script: ScriptFacts | LaunchFacts) -> Verdict:
    """FAIL where the launcher will refuse or mis-place ranks, WARN where the run will cost time."""
    facts = script if isinstance(script, LaunchFacts) else LaunchFacts(script)
    findings: list[Finding] = []
    visible, mask = command_visible(command, node)
    if VISIBLE in command.env:
        findings.append(note("LAUNCH_VISIBLE_IN_COMMAND", VISIBLE,
                             f"the command sets {VISIBLE}={command.env[VISIBLE]}: the job sees {visible} GPU"
                             f"{'s' if visible != 1 else ''}"))
    if command.runs_module and _module(command, facts.module, findings):
        return findings_verdict(findings, ok_summary="", subject="launch command",
                                details={"launcher": command.launcher, "module": command.script})
    if command.launcher == "torchrun":
        _torchrun(command, node, visible, facts.script, findings)
    elif command.launcher == "deepspeed":
        deepspeed_slots(command, node.node_gpus, visible, mask, facts.hostfile, findings)
    elif facts.script.spawns is not None:
        findings.append(note("LAUNCH_SCRIPT_SPAWNS", command.script,
                             f"the script starts its own processes ({facts.script.spawns}): python runs it once and it "
                             "starts the ranks"))
    elif visible > 1:
        findings.append(problem(Status.WARN, "LAUNCH_ONE_RANK", command.script,
                                f"plain python starts one process: 1 of the {visible} visible GPUs is used",
                                f"Launch with torchrun --standalone --nproc-per-node=gpu {command.script} ..."))
    _ports(command, findings)
    _local_rank(command, node, facts.script, findings)
    _script(command, facts.script, findings)
    ranks = launch_ranks(command, node, facts.hostfile, facts.script.spawns is not None)
    _rank_logs(command, ranks, findings)
    summary = (f"{command.launcher} starts {ranks} rank{'s' if ranks != 1 else ''} on {visible} visible GPU"
               f"{'s' if visible != 1 else ''}" if ranks is not None else
               f"python runs {command.script} once on {visible} visible GPU{'s' if visible != 1 else ''}"
               if command.launcher == "python" else f"{command.launcher} command")
    metrics = [Metric("launch_ranks", ranks, "ranks")] if ranks is not None else []
    return findings_verdict(findings, ok_summary=summary, subject="launch command", metrics=metrics,
                            details={"launcher": command.launcher, "options": dict(command.options),
                                     "script": command.script, "script_args": list(command.script_args),
                                     "env": dict(command.env), "ranks": ranks, "visible_gpus": visible})


def _torchrun(command: LaunchCommand, node: LaunchNode, visible: int, script: ScriptFacts,
              findings: list[Finding]) -> None:
    given = command.option("nproc-per-node")
    value = str(given) if given is not None else "1"
    where = "--nproc-per-node"
    if given is None and visible > 1 and script.spawns is not None:
        findings.append(note("LAUNCH_SCRIPT_SPAWNS", command.script,
                             f"1 rank, and the script starts its own processes ({script.spawns})"))
    elif given is None and visible > 1:
        findings.append(problem(Status.WARN, "LAUNCH_ONE_RANK", where,
                                f"not given: torchrun starts 1 rank, using 1 of the {visible} visible GPUs",
                                "Add --nproc-per-node=gpu (one rank per visible GPU)."))
    elif value.lstrip("-").isdigit():
        count = int(value)
        if count < 1:
            findings.append(problem(Status.FAIL, "LAUNCH_NPROC_INVALID", where,
                                    f"{count} ranks: torchrun needs 1 or more",
                                    "Use --nproc-per-node=gpu or a positive number."))
        elif visible and count > visible:
            findings.append(problem(Status.FAIL, "LAUNCH_NPROC_ABOVE_GPUS", where,
                                    f"{count} ranks but the job sees {visible} GPU{'s' if visible != 1 else ''}: "
                                    f"ranks {visible}..{count - 1} fail at torch.cuda.set_device (invalid device "
                                    "ordinal), or share a GPU",
                                    f"Use --nproc-per-node={visible} or --nproc-per-node=gpu."))
        elif visible and count < visible:
            findings.append(note("LAUNCH_FEWER_RANKS", where, f"{count} of the {visible} visible GPUs used"))
        elif not visible:
            findings.append(note("LAUNCH_CPU_RANKS", where, f"no GPU visible: {count} ranks run on CPU (gloo)"))
    elif value == "gpu":
        if not visible:
            findings.append(problem(Status.FAIL, "LAUNCH_NPROC_GPU_NO_CUDA", where,
                                    "gpu on a node where torch sees no GPU: torchrun stops with "
                                    "ValueError('Cuda is not available.')",
                                    f"Check the driver and {VISIBLE}, or give a number of CPU ranks "
                                    "(--nproc-per-node=2) for a gloo run."))
    elif value == "auto":
        if not visible:
            findings.append(problem(Status.WARN, "LAUNCH_NPROC_AUTO_CPUS", where,
                                    f"auto without a GPU starts one rank per CPU ({node.cpus or 'all'} ranks)",
                                    "Give the rank count (--nproc-per-node=2) or fix GPU visibility."))
    elif value == "cpu":
        findings.append(problem(Status.WARN if visible else Status.PASS, "LAUNCH_NPROC_CPU", where,
                                f"cpu starts one rank per CPU ({node.cpus or 'all'} ranks), not one per GPU",
                                "Use --nproc-per-node=gpu for one rank per GPU."))
    else:
        findings.append(problem(Status.FAIL, "LAUNCH_NPROC_INVALID", where,
                                f"{value!r}: torchrun raises 'Unsupported nproc_per_node value'",
                                "Use a number, gpu or auto."))
    _nnodes(command, findings)
    _restarts(command, findings)
    if command.legacy_launch:
        findings.append(note("LAUNCH_DEPRECATED_LAUNCHER", "torch.distributed.launch",
                             "deprecated (torch warns at start) but it still runs; torchrun is the same launcher "
                             "without --local-rank"))
    if command.option("standalone") and any(command.option(k) for k in ("rdzv-endpoint", "rdzv-backend", "rdzv-id")):
        findings.append(note("LAUNCH_STANDALONE_OVERRIDES", "--standalone",
                             "--rdzv-backend/--rdzv-endpoint/--rdzv-id are replaced by --standalone's own"))


def _nnodes(command: LaunchCommand, findings: list[Finding]) -> None:
    raw = command.option("nnodes")
    if raw is None:
        return
    parts = str(raw).split(":")
    try:
        low, high = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
        if len(parts) > 2:
            raise ValueError
    except ValueError:
        findings.append(problem(Status.FAIL, "LAUNCH_NNODES_INVALID", "--nnodes",
                                f"{raw!r}: torchrun reads N or MIN:MAX", "Use --nnodes=1 on one node."))
        return
    if not 0 < low <= high:
        findings.append(problem(Status.FAIL, "LAUNCH_NNODES_INVALID", "--nnodes",
                                f"{raw!r}: torchrun needs 0 < MIN <= MAX", "Use --nnodes=1 on one node."))
    elif command.option("standalone") and low > 1:
        findings.append(problem(Status.FAIL, "LAUNCH_STANDALONE_MULTINODE", "--nnodes",
                                f"{raw} nodes with --standalone: the rendezvous runs on localhost, no other node can "
                                f"join, and this one waits for {low} until the rendezvous times out",
                                "Drop --nnodes (one node) or replace --standalone with --rdzv-backend=c10d "
                                "--rdzv-endpoint=HOST:PORT on every node."))
    elif command.option("standalone") and high > 1:
        findings.append(problem(Status.WARN, "LAUNCH_STANDALONE_MULTINODE", "--nnodes",
                                f"{raw} with --standalone: other nodes cannot join a localhost rendezvous, so the job "
                                "runs on this node alone", "Use --nnodes=1 with --standalone."))
    elif low > 1:
        findings.append(note("LAUNCH_MULTI_NODE", "--nnodes",
                             f"the job waits for {low} nodes; preflight judges this one only (run it on every node)"))


def _restarts(command: LaunchCommand, findings: list[Finding]) -> None:
    raw = command.option("max-restarts")
    if raw is None:
        return
    try:
        count = int(str(raw))
    except ValueError:
        findings.append(problem(Status.FAIL, "LAUNCH_RESTARTS_INVALID", "--max-restarts",
                                f"{raw!r} is not a number", "Use --max-restarts=N with N >= 0."))
        return
    if count < 0:
        findings.append(problem(Status.FAIL, "LAUNCH_RESTARTS_INVALID", "--max-restarts",
                                f"{count}: torchrun asserts max_restarts >= 0", "Use --max-restarts=N with N >= 0."))


def _script(command: LaunchCommand, script: ScriptFacts, findings: list[Finding]) -> None:
    restarts = command.option("max-restarts")
    if script.exists is False:
        findings.append(problem(Status.WARN, "LAUNCH_SCRIPT_MISSING", command.script,
                                "the training script is not found from the directory preflight runs in, so it "
                                "could not be checked (the job fails the same way if started from here)",
                                "Run preflight from the job's directory, or give the script's full path."))
    if restarts is None or not str(restarts).isdigit() or int(str(restarts)) == 0:
        return
    if script.resumes is False:
        findings.append(problem(Status.WARN, "LAUNCH_RESTARTS_WITHOUT_RESUME", "--max-restarts",
                                f"{restarts} restarts, but {script.path or command.script} loads no checkpoint: each "
                                "restart trains from step 0 again (static reading of the script)",
                                "Load the latest checkpoint at start (load_checkpoint / torch.load + load_state_dict / "
                                "dcp.load) or drop --max-restarts."))
    elif script.resumes is None:
        findings.append(note("LAUNCH_RESTARTS_UNCHECKED", "--max-restarts",
                             f"{restarts} restarts: could not read the script to see whether it resumes"))


def _rank_logs(command: LaunchCommand, ranks: int | None, findings: list[Finding]) -> None:
    """A tip, not a problem: an unprefixed console costs nothing."""
    if ranks is None or ranks < 2:
        return
    if command.launcher == "torchrun":
        tee, redirects = str(command.option("tee") or "0"), str(command.option("redirects") or "0")
        if tee == "0" and redirects == "0" and not command.option("local-ranks-filter"):
            findings.append(note("LAUNCH_NO_RANK_PREFIX", "--tee",
                                 f"{ranks} ranks share one console without a rank prefix (tip: --tee 3 prefixes each "
                                 "line with its rank and keeps per-rank logs)"))
    elif command.launcher == "deepspeed" and not command.option("enable_each_rank_log"):
        findings.append(note("LAUNCH_NO_RANK_PREFIX", "--enable_each_rank_log",
                             f"{ranks} ranks share one console (tip: --enable_each_rank_log DIR keeps one log per "
                             "rank)"))


def _module(command: LaunchCommand, module: ModuleLookup | None, findings: list[Finding]) -> bool:
    """``python -m NAME`` / ``torchrun -m NAME``: the module must be there for the job to start.

    True when it is not (the one finding that matters then: nothing else of the line runs)."""
    name = command.script
    where = f"-m {name}"
    if module is None or module.state in ("found", "unknown"):
        if module is not None and module.state == "unknown":
            findings.append(note("LAUNCH_MODULE_UNCHECKED", where, f"could not ask the job's interpreter for {name} "
                                 f"({module.detail})"))
        return False
    part = module.part or name
    hint = _launcher_hint(name)
    if module.state == "missing" and "." in part:
        findings.append(problem(Status.FAIL, "LAUNCH_MODULE_MISSING", where,
                                f"No module named {part}: python exits at once and the job never starts{hint}",
                                "Use torchrun (or python -m torch.distributed.run) with the same options." if hint
                                else f"Name a module that exists ({part} does not), or the script's path."))
    elif module.state == "missing":
        findings.append(problem(Status.WARN, "LAUNCH_MODULE_NOT_FOUND", where,
                                f"no package {part} in the job's interpreter from the directory preflight runs in: "
                                "it could not be checked (the job fails the same way if started from here)",
                                "Run preflight from the job's directory, or install the package."))
        return False
    elif module.state == "not-a-package":
        findings.append(problem(Status.FAIL, "LAUNCH_MODULE_MISSING", where,
                                f"{part} is a module, not a package: python cannot find {name} and exits",
                                f"Name a module that exists{hint or ''}."))
    else:
        findings.append(problem(Status.FAIL, "LAUNCH_MODULE_MISSING", where,
                                f"{name} is a package without __main__: 'cannot be directly executed', the job "
                                "never starts", f"Name the module to run inside {name}{hint or ''}."))
    return True


def _launcher_hint(name: str) -> str:
    if name.startswith("torch.") and name not in LAUNCHER_MODULES:
        return " (torch's launcher is torch.distributed.run, the torchrun command)"
    return ""


def _ports(command: LaunchCommand, findings: list[Finding]) -> None:
    """``--master-port``/``--master_port`` and a rendezvous endpoint's port must be a TCP port."""
    names = ("master-port",) if command.launcher == "torchrun" else ("master_port",)
    for name in names:
        raw = command.option(name)
        if raw is None:
            continue
        text = str(raw)
        if not text.isdigit() or not 0 < int(text) < 65536:
            findings.append(problem(Status.FAIL, "LAUNCH_PORT_INVALID", f"--{name}",
                                    f"{text!r} is not a TCP port (1-65535): the rendezvous cannot listen on it and "
                                    "the job never starts", f"Use a free port such as --{name}=29500."))
    endpoint = command.option("rdzv-endpoint") if command.launcher == "torchrun" else None
    if isinstance(endpoint, str) and ":" in endpoint:
        port = endpoint.rsplit(":", 1)[1]
        if port and (not port.isdigit() or not 0 <= int(port) < 65536):
            findings.append(problem(Status.FAIL, "LAUNCH_PORT_INVALID", "--rdzv-endpoint",
                                    f"port {port!r} of {endpoint} is not a TCP port: the rendezvous cannot start",
                                    "Use HOST:PORT with a port from 1 to 65535 (or 0 for any free one)."))


def passed_local_rank(command: LaunchCommand, torch_version: str | None) -> str | None:
    """The ``--local-rank=N`` spelling the launcher appends to the script's arguments, None when it appends none."""
    if command.launcher == "deepspeed":
        return None if command.option("no_local_rank") else "--local_rank"
    if command.launcher == "torchrun" and command.legacy_launch and not command.option("use-env"):
        major = torch_version.split(".", 1)[0] if torch_version else ""
        return "--local_rank" if major.isdigit() and int(major) < 2 else "--local-rank"
    return None


def _local_rank(command: LaunchCommand, node: LaunchNode, script: ScriptFacts, findings: list[Finding]) -> None:
    """The launcher's ``--local-rank=N`` against the script's argparse."""
    spelling = passed_local_rank(command, node.torch_version)
    arguments = script.arguments
    if spelling is None or arguments is None or arguments.mode != "argparse" or arguments.accepts(f"{spelling}=0"):
        return
    declared = sorted(o for o in arguments.options if "local" in o and "rank" in o)
    has = f"declares only {', '.join(declared)}" if declared else "declares no local rank option"
    launcher = ("DeepSpeed's launcher" if command.launcher == "deepspeed"
                else f"torch.distributed.launch (torch {node.torch_version or '2.x'})")
    other = "--local_rank" if spelling == "--local-rank" else "--local-rank"
    fix = (f'Declare both spellings: parser.add_argument("{spelling}", "{other}", type=int, default=-1), or '
           + ("pass --no_local_rank and read os.environ['LOCAL_RANK']." if command.launcher == "deepspeed"
              else "launch with torchrun (it passes no argument; read os.environ['LOCAL_RANK'])."))
    findings.append(problem(Status.FAIL, "LAUNCH_LOCAL_RANK_REFUSED", spelling,
                            f"{launcher} passes {spelling}=N to {command.script}, whose argparse ({arguments.where}) "
                            f"{has}: every rank exits with 'unrecognized arguments: {spelling}=0'", fix))
