"""The job's launch command judged against the GPUs it will see, before it runs.

torchrun (torch 2.13 ``torch/distributed/run.py``): ``determine_local_world_size`` turns
``--nproc-per-node`` into a rank count (an integer; ``gpu`` = ``torch.cuda.device_count()``, a
``ValueError("Cuda is not available.")`` without CUDA; ``auto`` = the accelerators, else one rank
per CPU; ``cpu`` = one per CPU); ``parse_min_max_nnodes`` reads ``--nnodes`` as ``N`` or
``MIN:MAX``; ``--standalone`` starts a rendezvous on ``localhost:0`` that no other node can join.
The default ``--nproc-per-node`` is 1 and the default ``--tee``/``--redirects`` 0 (worker output
reaches the console unprefixed, interleaved across ranks).

DeepSpeed's runner (0.19.8 ``deepspeed/launcher/runner.py`` ``main``): without a hostfile the
resource pool is ``localhost`` with ``device_count()`` slots; ``--include``/``--exclude`` are
``NAME[:SLOT,...][@...]`` filters of that pool (``parse_resource_filter``: unknown host or slot is a
``ValueError``, both together too); ``--num_gpus``/``--num_nodes`` cannot be combined with them;
a set ``CUDA_VISIBLE_DEVICES`` becomes ``--include localhost:<its value>`` when no filter is given,
and is ignored (deleted) when one is.
"""

from __future__ import annotations

from dataclasses import dataclass

from preflight.judge.findings import Finding, findings_verdict, note, problem
from preflight.outcome import Metric, Status, Verdict
from preflight.parse.launch_command import LaunchCommand

VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class LaunchNode:
    """What the launch depends on: GPUs NVML lists, GPUs the job's shell sees, its mask, CPUs."""

    node_gpus: int
    visible_gpus: int
    visible_var: str | None
    cpus: int | None = None


@dataclass(frozen=True, slots=True)
class ScriptFacts:
    """What is known about the launched script: does it exist, does it resume from a checkpoint."""

    path: str | None
    exists: bool | None
    resumes: bool | None


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


def launch_ranks(command: LaunchCommand, node: LaunchNode) -> int | None:
    """Ranks on this node the command starts; None when the launcher decides at run time or fails."""
    visible, mask = command_visible(command, node)
    if command.launcher == "python":
        return 1
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
    slots = _deepspeed(command, node, visible, mask, [])
    return len(slots) if slots else None


def judge_launch_command(command: LaunchCommand, node: LaunchNode, script: ScriptFacts) -> Verdict:
    """FAIL where the launcher will refuse or mis-place ranks, WARN where the run will cost time."""
    findings: list[Finding] = []
    visible, mask = command_visible(command, node)
    if VISIBLE in command.env:
        findings.append(note("LAUNCH_VISIBLE_IN_COMMAND", VISIBLE,
                             f"the command sets {VISIBLE}={command.env[VISIBLE]}: the job sees {visible} GPU"
                             f"{'s' if visible != 1 else ''}"))
    if command.launcher == "torchrun":
        _torchrun(command, node, visible, findings)
    elif command.launcher == "deepspeed":
        _deepspeed(command, node, visible, mask, findings)
    elif visible > 1:
        findings.append(problem(Status.WARN, "LAUNCH_ONE_RANK", command.script,
                                f"plain python starts one process: 1 of the {visible} visible GPUs is used",
                                f"Launch with torchrun --standalone --nproc-per-node=gpu {command.script} ..."))
    _script(command, script, findings)
    ranks = launch_ranks(command, node)
    _rank_logs(command, ranks, findings)
    summary = (f"{command.launcher} starts {ranks} rank{'s' if ranks != 1 else ''} on {visible} visible GPU"
               f"{'s' if visible != 1 else ''}" if ranks is not None else f"{command.launcher} command")
    metrics = [Metric("launch_ranks", ranks, "ranks")] if ranks is not None else []
    return findings_verdict(findings, ok_summary=summary, subject="launch command", metrics=metrics,
                            details={"launcher": command.launcher, "options": dict(command.options),
                                     "script": command.script, "script_args": list(command.script_args),
                                     "env": dict(command.env), "ranks": ranks, "visible_gpus": visible})


def _torchrun(command: LaunchCommand, node: LaunchNode, visible: int, findings: list[Finding]) -> None:
    given = command.option("nproc-per-node")
    value = str(given) if given is not None else "1"
    where = "--nproc-per-node"
    if given is None and visible > 1:
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
        findings.append(problem(Status.WARN, "LAUNCH_DEPRECATED_LAUNCHER", "torch.distributed.launch",
                                "deprecated: it passes --local-rank=N to the script (unless --use-env), which a "
                                "script reading LOCAL_RANK from the environment refuses",
                                "Use torchrun (python -m torch.distributed.run) with the same options."))
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
        findings.append(problem(Status.WARN, "LAUNCH_MULTI_NODE", "--nnodes",
                                f"the job waits for {low} nodes; preflight judges this one only",
                                "Run preflight on every node of the job."))


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
    if ranks is None or ranks < 2:
        return
    if command.launcher == "torchrun":
        tee, redirects = str(command.option("tee") or "0"), str(command.option("redirects") or "0")
        if tee == "0" and redirects == "0" and not command.option("local-ranks-filter"):
            findings.append(problem(Status.WARN, "LAUNCH_NO_RANK_PREFIX", "--tee",
                                    f"{ranks} ranks print to one console without a rank prefix: lines interleave "
                                    "and an error cannot be traced to its rank",
                                    "Add --tee 3 (prefixes each line with [default<rank>]: and keeps per-rank log "
                                    "files; add --log-dir DIR to choose where)."))
    elif command.launcher == "deepspeed" and not command.option("enable_each_rank_log"):
        findings.append(problem(Status.WARN, "LAUNCH_NO_RANK_PREFIX", "--enable_each_rank_log",
                                f"{ranks} ranks print to one console without a rank prefix",
                                "Add --enable_each_rank_log DIR (one log file per rank)."))


def _deepspeed(command: LaunchCommand, node: LaunchNode, visible: int, mask: str | None,
               findings: list[Finding]) -> list[int] | None:
    """The runner's checks in its order; the GPU slots it launches on, None when it refuses or cannot tell."""
    include, exclude = command.option("include"), command.option("exclude")
    gpus, nodes = command.option("num_gpus"), command.option("num_nodes")
    if command.option("hostfile"):
        findings.append(note("LAUNCH_DS_HOSTFILE", "--hostfile",
                             "a hostfile makes a multi-node launch over ssh; preflight judges this node only"))
        return None
    if include and exclude:
        findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_CONFLICT", "--include",
                                "--include and --exclude together: DeepSpeed raises 'include_str and exclude_str are "
                                "mutually exclusive'", "Keep one of them."))
        return None
    if (include or exclude) and (gpus is not None or nodes is not None):
        findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_CONFLICT", "--num_gpus",
                                "--num_gpus/--num_nodes with --include/--exclude: DeepSpeed raises 'Cannot specify "
                                "num_nodes/gpus with include/exclude'", "Keep either the filter or the counts."))
        return None
    if nodes is not None and str(nodes).lstrip("-").isdigit() and int(str(nodes)) > 1:
        findings.append(problem(Status.FAIL, "LAUNCH_DS_NO_HOSTFILE", "--num_nodes",
                                f"{nodes} nodes without a hostfile: DeepSpeed raises 'Num nodes is >1 but no extra "
                                "nodes available via hostfile'", "Use --num_nodes 1 (or drop it) on one node."))
        return None
    if mask is not None and (include or exclude or gpus is not None or nodes is not None):
        findings.append(problem(Status.WARN, "LAUNCH_DS_IGNORES_VISIBLE", VISIBLE,
                                f"{VISIBLE}={mask} is ignored (and removed) by DeepSpeed's runner because "
                                "--include/--exclude/--num_gpus/--num_nodes is given: slots count physical GPUs",
                                f"Drop {VISIBLE} and name the GPUs with --include localhost:0,1, or drop the filter."))
    if not node.node_gpus:
        findings.append(note("LAUNCH_DS_CPU", "deepspeed",
                             "no GPU: DeepSpeed's CPU accelerator starts one rank per NUMA node (LOCAL_SIZE if set)"))
        return None
    return _deepspeed_slots(command, node.node_gpus, visible, mask, findings)


def _deepspeed_slots(command: LaunchCommand, node_gpus: int, visible: int, mask: str | None,
                     findings: list[Finding]) -> list[int] | None:
    """The GPU slots DeepSpeed's runner gives the job; None when it refuses (findings say why)."""
    include, exclude = command.option("include"), command.option("exclude")
    gpus = command.option("num_gpus")
    if command.option("hostfile") or (include and exclude) or not node_gpus:
        return None
    pool = list(range(node_gpus))
    where = "--include" if include else "--exclude" if exclude else VISIBLE
    text = str(include or exclude or "")
    if not text and mask is not None and gpus is None and command.option("num_nodes") is None:
        text, where = f"localhost:{mask}", VISIBLE
        include = text
    if text:
        chosen = _filter(text, pool, bool(include), where, findings)
        if chosen is None:
            return None
    else:
        chosen = pool
    if gpus is not None:
        try:
            count = int(str(gpus))
        except ValueError:
            findings.append(problem(Status.FAIL, "LAUNCH_DS_NUM_GPUS", "--num_gpus", f"{gpus!r} is not a number",
                                    "Use --num_gpus N."))
            return None
        if count > node_gpus:
            findings.append(problem(Status.FAIL, "LAUNCH_DS_NUM_GPUS", "--num_gpus",
                                    f"{count} GPUs asked, the node has {node_gpus}: DeepSpeed launches ranks on "
                                    f"slots 0..{count - 1} unchecked and the extra ranks fail at set_device",
                                    f"Use --num_gpus {node_gpus} or fewer."))
            return None
        if count > 0:
            chosen = list(range(count))
    return chosen


def _filter(text: str, pool: list[int], including: bool, where: str, findings: list[Finding]) -> list[int] | None:
    """``parse_resource_filter`` on the one-host pool ``localhost``."""
    slots: list[int] = []
    whole = False
    for spec in text.split("@"):
        host, sep, listed = spec.partition(":")
        if host != "localhost":
            findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_HOST", where,
                                    f"host {host!r}: without a hostfile DeepSpeed knows only 'localhost' and raises "
                                    f"\"Hostname '{host}' not found in hostfile\"",
                                    "Write the filter as localhost:0,1,..."))
            return None
        if not sep:
            whole = True
            continue
        for item in listed.split(","):
            if not item.strip().isdigit():
                message = (f"{VISIBLE} entry {item!r} is not a GPU index: DeepSpeed turns {VISIBLE} into "
                           "--include localhost:<value> and fails in int()" if where == VISIBLE
                           else f"slot {item!r} is not a number (DeepSpeed's int() fails)")
                findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_SLOT", where, message,
                                        f"Use GPU indices (nvidia-smi -L) in {where}, not UUIDs."))
                return None
            slot = int(item)
            if slot not in pool:
                findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_SLOT", where,
                                        f"slot {slot}: the node has GPUs 0..{len(pool) - 1}; DeepSpeed raises "
                                        f"\"No slot '{slot}' specified on host 'localhost'\"",
                                        f"Use slots between 0 and {len(pool) - 1}."))
                return None
            slots.append(slot)
    if including:
        return pool if whole else sorted(set(slots))
    return [] if whole else [s for s in pool if s not in set(slots)]
