"""The traps about which ranks make which calls, each a function of the :class:`Walk` and the program's facts.

1. A DeepSpeed engine's ``save_checkpoint``/``save_16bit_model`` under a rank condition: it is a
   collective (DeepSpeed 0.19.8 ``runtime/engine.py``: ``save_checkpoint`` calls ``dist.barrier()``,
   its docstring: "all processes must call this method"), so the other ranks never join and the
   job hangs. Accelerate's ``save_state`` is a collective only under DeepSpeed or FSDP (accelerate
   ``accelerator.py`` ``save_state``: ``model.save_checkpoint`` / ``save_fsdp_model`` there,
   ``wait_for_everyone`` with ``automatic_checkpoint_naming``); under plain DDP it is a note, and
   ``if accelerator.distributed_type == DistributedType.DEEPSPEED or accelerator.is_main_process``
   (every process under DeepSpeed) is right.
2. Any other collective (``dist.all_reduce``, ``barrier``, ``accelerator.wait_for_everyone``)
   under a rank condition, unless the other branch makes it too or a second rank-conditional
   barrier of the same function pairs it (rank 0 first, then the others).
3. A forward pass of a sharded model (FSDP, ZeRO-3) under a rank condition: each layer's forward
   all-gathers its parameters from every rank, so one rank alone waits forever (litgpt
   ``finetune/lora.py`` after PR #2213 calls ``generate_example(fabric, model, ...)`` under
   ``fabric.global_rank == 0`` with an FSDP2 model).
4. NCCL ``init_process_group`` with no ``torch.cuda.set_device`` and no ``device_id=``, and
   ``DistributedDataParallel`` without ``device_ids`` there: every rank lands on ``cuda:0``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from preflight.judge.script_traps.facts import ProgramFacts
from preflight.judge.script_traps.names import last
from preflight.judge.script_traps.scan import CallSite, Walk, collective_kind, line_text
from preflight.outcome import Status

ENGINE_SAVES = frozenset({"save_checkpoint", "save_16bit_model"})
ACCELERATE_STATE = frozenset({"save_state", "load_state"})
BARRIERS = frozenset({"barrier", "monitored_barrier", "wait_for_everyone"})
MODEL_NAMES = frozenset({"model", "module", "net", "unet", "transformer", "engine", "model_engine", "ddp_model",
                         "fsdp_model", "sharded_model", "raw_model"})
FORWARD_METHODS = frozenset({"forward", "generate", "sample"})
FORWARD_FUNCTIONS = ("generate", "sample", "evaluate", "forward", "predict")
HANG = "the job hangs there until the collective timeout (NCCL: 10 minutes by default), then every rank is killed"


@dataclass(frozen=True, slots=True)
class Trap:
    """One finding of the scan: where, which trap, what it does, the fix, how sure and what it costs."""

    line: int
    code: str
    message: str
    fix: str
    path: str = ""
    """The module the line is in, relative to the script's directory; empty for the script itself."""
    sure: bool = False
    """True when the source leaves no doubt (a direct call under a direct rank test); else likely."""
    cost: str = ""
    status: Status = Status.WARN
    """WARN for a problem; PASS for a note (a pattern that costs nothing in this job)."""


def _report_path(walk: Walk, path: str) -> str:
    return "" if path == walk.script.path else path


def _guard(site: CallSite) -> str:
    cond = site.conditions[-1]
    return f"`{cond.text}` (line {cond.line})"


def rank_branch_collectives(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Traps 1 and 2: collectives only some ranks reach."""
    hits: list[tuple[CallSite, str]] = []
    for site in walk.calls:
        if not site.conditions:
            continue
        kind = collective_kind(site.module, site.node)
        if kind is None or kind in site.balanced:
            continue
        hits.append((site, kind))
    paired = _paired_barriers(hits)
    automatic = _automatic_checkpoint_naming(walk)
    found: list[Trap] = []
    for site, kind in hits:
        if id(site) in paired:
            continue
        path, line = site.report_at()
        where = _report_path(walk, path)
        via = site.via()
        sure = not via
        if kind in ENGINE_SAVES:
            found.append(Trap(line, "SCRIPT_SAVE_ON_ONE_RANK",
                              f"{kind}(){via} runs only where {_guard(site)} holds: DeepSpeed's {kind} is a "
                              "collective (every rank must call it), the other ranks never join it",
                              f"Call {kind}() on every rank (DeepSpeed writes from the ranks that must write); keep "
                              "only prints and logging under the rank check.", where, sure, HANG))
        elif kind in ACCELERATE_STATE and not automatic:
            if not any("DEEPSPEED" in c.text or "distributed_type" in c.text for c in site.conditions):
                found.append(_accelerate_state(site, kind, via, facts, where, line))
        else:
            found.append(Trap(line, "SCRIPT_COLLECTIVE_IN_RANK_BRANCH",
                              f"{kind}(){via} runs only where {_guard(site)} holds: every rank of the group must "
                              "call it, so the ranks that skip the branch leave the others waiting",
                              f"Move {kind}() out of the rank-dependent branch (or call it in every branch).",
                              where, sure, HANG))
    return found


def _accelerate_state(site: CallSite, kind: str, via: str, facts: ProgramFacts, where: str, line: int) -> Trap:
    """``accelerator.save_state`` on the main process: a hang under DeepSpeed/FSDP, nothing under plain DDP."""
    fix = (f"Call accelerator.{kind}() on every process (Accelerate writes from the main process itself); keep only "
           "the old-checkpoint cleanup under is_main_process.")
    if facts.deepspeed_or_fsdp is not None:
        return Trap(line, "SCRIPT_SAVE_ON_ONE_RANK",
                    f"accelerator.{kind}(){via} runs only where {_guard(site)} holds: under DeepSpeed or FSDP, which "
                    f"this script is written for ({facts.deepspeed_or_fsdp}), {kind} is a collective "
                    "(save_checkpoint / the FSDP state-dict gather) and the other processes never join it; under "
                    "plain DDP it is harmless",
                    fix, where, not via, HANG + " (DeepSpeed and FSDP runs only)")
    return Trap(line, "SCRIPT_SAVE_STATE_ON_MAIN",
                f"accelerator.{kind}(){via} on the main process only: harmless under plain DDP (Accelerate "
                "synchronises nothing there); under a DeepSpeed or FSDP accelerate config it would hang",
                fix, where, not via, "nothing under plain DDP", Status.PASS)


def _automatic_checkpoint_naming(walk: Walk) -> bool:
    """``ProjectConfiguration(automatic_checkpoint_naming=True)``: save_state then calls wait_for_everyone."""
    for site in walk.calls:
        for keyword in site.node.keywords:
            if keyword.arg == "automatic_checkpoint_naming" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False):
                return True
    return False


def _paired_barriers(hits: list[tuple[CallSite, str]]) -> set[int]:
    """Barriers of one function under two different rank tests: the rank-0-first pattern, balanced."""
    by_scope: dict[tuple[str, str, str], set[int]] = {}
    for site, kind in hits:
        if kind in BARRIERS:
            by_scope.setdefault((site.module.path, site.scope, kind), set()).add(site.conditions[-1].line)
    paired: set[int] = set()
    for site, kind in hits:
        if len(by_scope.get((site.module.path, site.scope, kind), set())) > 1:
            paired.add(id(site))
    return paired


def sharded_forward_on_one_rank(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Trap 3: a sharded model's forward (or generate) where only some ranks go."""
    if facts.sharded is None:
        return []
    found: list[Trap] = []
    for site in walk.calls:
        if not site.conditions or not site.reached:
            continue
        model = _forward_of(site)
        if model is None:
            continue
        path, line = site.report_at()
        via = site.via()
        found.append(Trap(line, "SCRIPT_SHARDED_FORWARD_ON_ONE_RANK",
                          f"{model}{via} runs a forward pass of the sharded model (sharded at {facts.sharded}) only "
                          f"where {_guard(site)} holds: every layer all-gathers its parameters from every rank, and "
                          "the ranks that skip the branch never join the gather",
                          "Run the forward (generation, evaluation) on every rank and keep only printing or saving its "
                          "result under the rank check, or gather a full copy of the model first.",
                          _report_path(walk, path), False, HANG))
    return found


def _forward_of(site: CallSite) -> str | None:
    """``model(x)``, ``model.generate(...)``, ``generate(model, ...)``: the call text when it runs the model."""
    func = site.node.func
    if isinstance(func, ast.Name) and func.id in MODEL_NAMES:
        return f"{func.id}(...)"
    if isinstance(func, ast.Attribute) and func.attr in FORWARD_METHODS and isinstance(func.value, ast.Name) and \
            func.value.id in MODEL_NAMES:
        return f"{func.value.id}.{func.attr}(...)"
    name = last(site.qualname)
    if name.startswith(FORWARD_FUNCTIONS) and any(isinstance(a, ast.Name) and a.id in MODEL_NAMES
                                                  for a in (*site.node.args, *(k.value for k in site.node.keywords))):
        return f"{name}(model, ...)"
    return None


def device_placement(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Trap 4: NCCL without set_device/device_id, and DDP without device_ids."""
    calls = walk.calls
    inits = [s for s in calls if last(s.qualname) == "init_process_group"]
    managed = any(last(s.qualname) in ("initialize", "Accelerator", "Trainer", "init_distributed", "Fabric")
                  and s.qualname.split(".")[0] in ("deepspeed", "accelerate", "transformers", "lightning")
                  for s in calls)
    sets_device = [s for s in calls if last(s.qualname) in ("set_device", "set_device_index")
                   or s.qualname in ("torch.cuda.device", "torch.set_default_device")]
    found: list[Trap] = []
    seen: set[tuple[str, int]] = set()
    for site in sets_device:
        arg = site.node.args[0] if site.node.args else None
        if last(site.qualname) == "set_device" and isinstance(arg, ast.Constant) and isinstance(arg.value, int) and \
                (site.module.path, site.line) not in seen:
            seen.add((site.module.path, site.line))
            found.append(Trap(site.line, "SCRIPT_FIXED_DEVICE",
                              f"{line_text(site.module.lines, site.line)}: every rank selects GPU {arg.value}",
                              "Use torch.cuda.set_device(int(os.environ['LOCAL_RANK'])).",
                              _report_path(walk, site.module.path), True,
                              "every rank shares one GPU: it runs out of memory or the job is N times slower"))
    device_id = any(any(k.arg == "device_id" for k in s.node.keywords) for s in inits)
    for site in inits:
        backend = _backend(site.node)
        strings = site.module.names.strings_of(backend) if backend is not None else {"nccl"}
        if not any("nccl" in text for text in strings) or managed or sets_device or device_id:
            continue
        found.append(Trap(site.line, "SCRIPT_NO_SET_DEVICE",
                          "init_process_group with NCCL, and no torch.cuda.set_device(LOCAL_RANK) or device_id= in "
                          "the script: every rank's .cuda() / 'cuda' tensors land on cuda:0",
                          "Call torch.cuda.set_device(local_rank) before init_process_group, or pass "
                          "device_id=torch.device('cuda', local_rank).", _report_path(walk, site.module.path), False,
                          "every rank on GPU 0: out of memory, or N times slower"))
    on_gpu = any("cuda" in line or "nccl" in line for m in walk.program.all_modules() for line in m.lines)
    for site in calls:
        if last(site.qualname) != "DistributedDataParallel" or managed or (site.module.path, site.line) in seen:
            continue
        seen.add((site.module.path, site.line))
        ids = next((k.value for k in site.node.keywords if k.arg == "device_ids"), None)
        if ids is None and len(site.node.args) > 1:
            ids = site.node.args[1]
        if ids is None and on_gpu and not sets_device and not device_id:
            found.append(Trap(site.line, "SCRIPT_DDP_NO_DEVICE_IDS",
                              "DistributedDataParallel without device_ids and no set_device: every rank's model is "
                              "on cuda:0, so all ranks share one GPU",
                              "Call torch.cuda.set_device(local_rank), move the model to it and pass "
                              "device_ids=[local_rank].", _report_path(walk, site.module.path), False,
                              "every rank on GPU 0: out of memory, or N times slower"))
        elif isinstance(ids, (ast.List, ast.Tuple)) and ids.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, int) for e in ids.elts):
            found.append(Trap(site.line, "SCRIPT_DDP_FIXED_DEVICE",
                              f"DistributedDataParallel(device_ids={ast.unparse(ids)}): every rank uses the same GPU",
                              "Pass device_ids=[local_rank].", _report_path(walk, site.module.path), True,
                              "every rank shares one GPU: it runs out of memory or the job is N times slower"))
    return found


def _backend(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "backend":
            return keyword.value
    return call.args[0] if call.args else None
