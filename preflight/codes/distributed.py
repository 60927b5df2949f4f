"""Catalogue entries: the rehearsal launches (DDP, FSDP2, ZeRO-1/2/3), `preflight rehearse`, and the
codes of the run itself (a check that crashed, the deadline, an interruption).

The strategy codes are built by the judges from the strategy's name (``f"{prefix}_LOSS_NOT_FINITE"``);
here they are expanded over the same names, so every concrete code has its entry.
"""

from __future__ import annotations

from preflight.codes.entry import Code, Kind
from preflight.judge.strategies import STRATEGIES, TITLES

AREA = "Rehearsal launches, preflight rehearse and the run"

_HANG_FIX = ("Re-run with NCCL_DEBUG=INFO and read the named rank's log; if the NCCL check shows peer-to-peer is "
             "broken, run the job with NCCL_P2P_DISABLE=1 and fix IOMMU/ACS on the host.")


def _launch(name: str) -> tuple[Code, ...]:
    """The launch failures every strategy shares (``judge.ddp.judge_launch_failure``)."""
    title, prefix = TITLES[name], name.upper()
    return (
        Code(f"{prefix}_RANK_HUNG",
             f"In the {title} rehearsal a rank stopped making progress past its phase's budget (named with where it "
             "waited).",
             f"A {title} job on this node hangs the same way: every rank waits in a collective until the NCCL "
             "timeout, and nothing is trained.",
             _HANG_FIX, kind=Kind.BLOCKER),
        Code(f"{prefix}_RANK_CRASHED",
             f"In the {title} rehearsal a rank exited with an error (its message and log tail are in the evidence).",
             f"The real {title} job crashes the same way at start; its peers are stopped after it.",
             "Read the named rank's log tail and fix the error it shows before starting the job.", kind=Kind.BLOCKER),
    )


def _strategy(name: str) -> tuple[Code, ...]:
    """The codes of ``judge.strategies.judge_strategy`` for one sharded strategy."""
    title, prefix = TITLES[name], name.upper()
    save_fix = ("Call checkpoint saves and loads on every rank (dcp.save, engine.save_checkpoint), never under "
                "`if rank == 0:`; if every rank does, check the checkpoint directory's disk (free space, a stalled "
                "network mount).")
    return (
        Code(f"{prefix}_CHECKPOINT_SAVE_HUNG",
             f"In the {title} rehearsal the checkpoint save never completed on some ranks.",
             "Saves are collectives: a job that saves like this hangs at its first checkpoint, every rank waiting "
             "until the process-group timeout.", save_fix, kind=Kind.BLOCKER),
        Code(f"{prefix}_CHECKPOINT_LOAD_HUNG",
             f"In the {title} rehearsal loading the checkpoint back never completed on some ranks.",
             "A resume after a crash or a preemption would hang in the same place.", save_fix, kind=Kind.BLOCKER),
        Code(f"{prefix}_OP_BUILD_FAILED",
             f"In the {title} rehearsal a JIT-built op (DeepSpeed's ops, a torch C++/CUDA extension) failed to "
             "compile; the compiler's message is quoted.",
             "The job builds the same op at its first step and stops there.",
             "Install the CUDA toolkit matching torch.version.cuda (see the toolkit checks), ninja and g++, or "
             "install DeepSpeed with its ops pre-built (DS_BUILD_OPS=1 pip install deepspeed).", kind=Kind.BLOCKER),
        Code(f"{prefix}_OP_BUILD_UNFINISHED",
             f"In the {title} rehearsal ranks were still loading (JIT-building) DeepSpeed's ops when the launch hit "
             "its deadline: a slow op build, not a hung rank.",
             "A job on a fresh node spends the same minutes compiling at its first step.",
             "Run preflight again (the build is cached), raise --launch-timeout, or install DeepSpeed with its ops "
             "pre-built.", kind=Kind.COST),
        Code(f"{prefix}_LOSS_NOT_FINITE",
             f"In the {title} rehearsal the loss of a tiny model became NaN or Inf.",
             "A tiny model on a fixed batch must learn: a non-finite loss points at a faulty GPU, a broken reduction "
             "or wrong mixed-precision settings, which would ruin the real run.",
             "Run the GPU checks and `dcgmi diag -r 2` on the named ranks' GPUs.", kind=Kind.BLOCKER),
        Code(f"{prefix}_LOSS_NOT_DECREASING",
             f"In the {title} rehearsal the loss did not fall over a few steps on a fixed batch.",
             "The optimizer's updates are not reaching the parameters correctly: the real job would not learn.",
             "As for the loss not finite: run the GPU checks and `dcgmi diag -r 2`; check the precision settings.",
             kind=Kind.BLOCKER),
        Code(f"{prefix}_RANKS_DIVERGED",
             f"In the {title} rehearsal ranks disagree with rank 0 where they must agree (global loss, probe loss, "
             "gathered parameters).",
             "Replicas drift apart silently: a faulty GPU, link or NCCL setup corrupts the collectives.",
             "Run the NCCL checks and `dcgmi diag` on the named rank's GPU.", kind=Kind.BLOCKER),
        Code(f"{prefix}_CHECKPOINT_UNAVAILABLE",
             f"The {title} steps passed but no checkpoint round trip was possible (the reason is quoted).",
             "The job's way of saving cannot be trusted on this node until it is known to work.",
             "Read the reason; check the checkpoint directory's filesystem and the torch/DeepSpeed versions.",
             kind=Kind.BLOCKER),
        Code(f"{prefix}_CHECKPOINT_NEEDS_NUMPY",
             f"The {title} checkpoint round trip could not run because numpy is missing in the job's environment.",
             "torch.distributed.checkpoint and every *_object collective convert through numpy: the job's first "
             "checkpoint save would crash.",
             "`pip install numpy` in the job's environment.", kind=Kind.BLOCKER),
        Code(f"{prefix}_CHECKPOINT_MISMATCH",
             f"The {title} checkpoint loaded back differs from the one saved (tensors or the probe loss).",
             "A resume would continue from corrupted state.",
             "Check the checkpoint directory's filesystem (a network mount caching stale data, a full disk) and that "
             "the versions that save and load agree.", kind=Kind.BLOCKER),
    )


CODES = (
    *_launch("ddp"),
    Code("DDP_DEVICE_SHARED",
         "In the DDP rehearsal several ranks ran on the same GPU.",
         "Ranks sharing a GPU share its memory and compute (out-of-memory, a fraction of the speed), and NCCL "
         "refuses duplicate GPUs in one communicator.",
         "Each rank must call torch.cuda.set_device(LOCAL_RANK); check CUDA_VISIBLE_DEVICES is not narrowed per rank "
         "to the same GPU.", kind=Kind.BLOCKER),
    Code("DDP_LOSS_NOT_FINITE",
         "In the DDP rehearsal the loss of a tiny fp32 model is NaN or Inf on some ranks.",
         "On a tiny fp32 model this points at a faulty GPU or driver that would ruin the real run.",
         "Run the GPU checks and `dcgmi diag -r 2` on the named rank's GPU.", kind=Kind.BLOCKER),
    Code("DDP_PARAMS_DIVERGED",
         "After one DDP step the parameters differ between ranks.",
         "DDP replicas must stay bit-identical; a rank whose all-reduce returns other data corrupts training "
         "silently.",
         "Run the NCCL checks and `dcgmi diag` on the named rank's GPU.", kind=Kind.BLOCKER),
    *(code for name in STRATEGIES[1:] for code in (*_launch(name), *_strategy(name))),
    Code("REHEARSAL_CRASHED",
         "`preflight rehearse`: a rank of the user's script raised or exited with an error.",
         "The real job crashes the same way; the other ranks stop after it.",
         "The first failing rank's traceback is in the evidence and its log under the report directory: fix that "
         "error and rehearse again.", kind=Kind.BLOCKER),
    Code("REHEARSAL_OOM",
         "`preflight rehearse`: a rank of the user's script ran out of memory (CUDA, the CPU allocator), or a rank "
         "or torchrun itself was killed by signal 9 (SIGKILL), which is what the kernel's OOM killer sends.",
         "The real job runs out of memory at the same step.",
         "Lower the per-GPU (micro) batch, turn on activation checkpointing, train in bf16 or shard the state "
         "(FSDP, ZeRO-2/3); `preflight size` shows what fits.", kind=Kind.BLOCKER),
    Code("REHEARSAL_HUNG",
         "`preflight rehearse`: ranks stopped making steps (the rank the others wait for is named with its stack; "
         "a rank whose own watchdog could not run, because native code held the GIL, is named as frozen).",
         "The real job hangs at the same place until the NCCL timeout.",
         "Usual causes: a collective only some ranks call (under `if rank == 0`), uneven batches across ranks, a "
         "rank blocked in I/O; give init_process_group a timeout= so the job fails instead of hanging.",
         kind=Kind.BLOCKER),
    Code("REHEARSAL_FIRST_COLLECTIVE_HUNG",
         "`preflight rehearse`: the process group came up but the first collective never completed on any rank.",
         "The link between the ranks is the suspect, not the script: no job can train here until it works.",
         "Run `preflight -k 'nccl or p2p or ddp'` to test NCCL, peer-to-peer and a DDP step on this node.",
         kind=Kind.BLOCKER),
    Code("REHEARSAL_NO_STEP",
         "`preflight rehearse`: no torch.optim optimizer stepped before the deadline (or the script ended without "
         "one).",
         "The rehearsal has nothing to measure; a JIT build or slow data loading still running at the deadline "
         "delays the real job's start the same way.",
         "Raise --timeout (the first JIT build takes minutes and is cached), check the loop calls optimizer.step() "
         "on a torch.optim.Optimizer.", kind=Kind.BLOCKER),
    Code("REHEARSAL_STEPS_UNCOUNTED",
         "`preflight rehearse`: the script ran backward passes but stepped no torch.optim optimizer (a hand-written "
         "update), so its steps cannot be counted (the check cannot decide).",
         "Nothing is measured: no step time, no scaling.",
         "Mark the steps: `--step-function NAME` counts each call of the script's function NAME, or the script calls "
         "step() from the module preflight_rehearsal (present only under rehearse) once per iteration.",
         kind=Kind.BLOCKER),
    Code("REHEARSAL_NEEDS_GPU",
         "`preflight rehearse` without a GPU: the script calls CUDA or asks for NCCL (torch.cuda.set_device, "
         ".cuda(), backend='nccl') and fails at that call.",
         "The job cannot run on this machine; the rehearsal says nothing about the script on the GPU node it is "
         "written for.",
         "Rehearse it on the GPU node, or let the script pick its device and backend from what is there (cuda and "
         "nccl with a GPU, else cpu and gloo).", kind=Kind.BLOCKER),
    Code("REHEARSAL_RANK_IDLE",
         "`preflight rehearse`: a rank ended without a single optimizer step while the other ranks trained.",
         "That rank's GPU is paid for and does no training; the size is left out of the scaling figures.",
         "Look for a rank condition that skips the training loop (`if rank != 0: return`) or an empty data shard "
         "for that rank.", kind=Kind.COST),
    Code("REHEARSAL_DEADLINE",
         "`preflight rehearse`: fewer steps than asked ran within the deadline.",
         "The figures rest on those steps only and are less certain.",
         "Raise --timeout (seconds per size) or ask for fewer --steps.", kind=Kind.COST),
    Code("REHEARSAL_ENDED_EARLY",
         "`preflight rehearse`: the script ended before the rehearsal's steps.",
         "The step time rests on fewer intervals (or on the first step only).",
         "Give the script a longer run for the rehearsal (it can read PREFLIGHT_REHEARSAL=1), or ask for fewer "
         "--warmup/--steps.", kind=Kind.COST),
    Code("REHEARSAL_INTERRUPTED",
         "`preflight rehearse`: preflight or torchrun went away while the script ran (the check cannot decide).",
         "Nothing is known about this size.",
         "Run the rehearsal again without interrupting it.", kind=Kind.BLOCKER),
    Code("REHEARSAL_SCALING_LOW",
         "`preflight rehearse`: more ranks give less than 80% of linear throughput against the smallest size.",
         "GPUs paid for are waiting (on communication, data or the host) instead of training.",
         "The summary names the likely cause from the communication model: overlap communication, accumulate "
         "gradients, shard less, or use fewer GPUs.", kind=Kind.COST),
    Code("REHEARSAL_SCALING_SUPERLINEAR",
         "`preflight rehearse`: more ranks give more than linear throughput, beyond the measured noise.",
         "The same per-rank work on more ranks cannot get faster per rank: the per-rank work differs between "
         "sizes (a global batch split across the ranks), caches hold more of it, or the baseline was slowed, so "
         "the scaling figure does not predict the job.",
         "Check each rank's batch is the same at every size (a fixed per-rank batch with DistributedSampler) and "
         "rehearse again, on the quiet node.", kind=Kind.COST),
    Code("RUN_DEADLINE",
         "The run's --timeout stopped a launch, or a phase never started, within its budget (the check cannot "
         "decide).",
         "The node was not tested there: neither a pass nor the node's fault.",
         "Raise --timeout, or run fewer checks (-k / -m) so the launch fits.", kind=Kind.BLOCKER),
    Code("RUN_INTERRUPTED",
         "The run was interrupted (Ctrl-C, a signal) before every check ran; shown in the one-line status.",
         "The checks that did not run say nothing about the node.",
         "Run preflight again to the end.", kind=Kind.BLOCKER),
    Code("NO_CHECK_FINISHED",
         "The run ended without one check finished (preflight or a plugin crashed first, e.g. on a cache "
         "location it cannot write): the run verdict is ERROR, exit code 2.",
         "Nothing about the node was judged: it is neither ready nor known to be broken.",
         "Read run.error in the report (the cause and its traceback), fix it (a writable HOME or "
         "PREFLIGHT_TORCH_EXTENSIONS_DIR, a working plugin) and run preflight again.", kind=Kind.BLOCKER),
    Code("RUN_INTERNAL_ERROR",
         "preflight or a plugin crashed after some checks had finished, before it found a failure: the run "
         "verdict is ERROR, exit code 2 (a failure found first keeps the verdict NOT READY).",
         "The checks that did not run judged nothing, so the node is not called ready.",
         "Read run.error in the report (the cause and its traceback), fix it and run preflight again; report it "
         "with the JSON report attached when it is preflight's own fault.", kind=Kind.BLOCKER),
    Code("CHECK_ERROR",
         "A check could not decide: a probe failed or did not answer (the summary says which).",
         "Something the job depends on is unknown, so the node is not called ready.",
         "Read the summary and evidence; fix what could not be read (permissions, a hung command) and run again.",
         kind=Kind.BLOCKER),
    Code("CHECK_CRASHED",
         "A check itself raised an exception (a bug in preflight or in a test plugin, or a setup that failed).",
         "That part of the node was not judged.",
         "Read the traceback in the evidence and report it with the report attached.", kind=Kind.BLOCKER),
    Code("CHECK_ASSERTION",
         "A check's plain `assert` failed (checks written as pytest tests can assert directly).",
         "What the assertion guards is not true on this node.",
         "Read the check's evidence; the assertion message says what was expected.", kind=Kind.BLOCKER),
)
