"""The classic traps, each a function of one :class:`~preflight.judge.script_traps.scan.Walk`.

1. ``save_checkpoint``/``save_state`` (DeepSpeed, Accelerate) under a rank-0 condition: a
   collective only one rank enters hangs the others (DeepSpeed's docs: "all processes must call
   this method"; deepspeedai/DeepSpeed PR #801, #2993);
2. NCCL ``init_process_group`` with no ``torch.cuda.set_device`` and no ``device_id=``, and
   ``DistributedDataParallel`` without ``device_ids`` there: every rank lands on ``cuda:0``;
3. a ``DistributedSampler`` (shuffling) whose ``set_epoch`` is never called in a loop: every
   epoch repeats the first epoch's order (torch's DistributedSampler docstring);
4. an FSDP model's ``state_dict()`` saved with ``torch.save`` on rank 0 without DCP or a full
   state dict: rank 0's shard, not the model; with ``FULL_STATE_DICT`` the ``state_dict()`` call is
   itself a collective and must not be inside the rank-0 branch;
5. any other collective inside a rank-conditional branch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from preflight.judge.script_traps.names import SAVE_CALLS, last
from preflight.judge.script_traps.scan import CallSite, Walk, collective_kind, line_text

RESUME_CALLS = frozenset({"load_checkpoint", "load_state", "load_state_dict", "set_state_dict",
                          "set_model_state_dict", "set_optimizer_state_dict", "load_model"})
"""Calls that restore training state (``torch.load``/``dcp.load`` are matched by module)."""

FULL_STATE_MARKERS = frozenset({"FullStateDictConfig", "FULL_STATE_DICT", "get_model_state_dict", "get_state_dict",
                                "full_optim_state_dict"})


@dataclass(frozen=True, slots=True)
class Trap:
    """One finding of the scan: where, which trap, what it does, the corrected form."""

    line: int
    code: str
    message: str
    fix: str


def _guard(site: CallSite) -> str:
    cond = site.conditions[-1]
    return f"`{cond.text}` (line {cond.line})"


def rank_branch_collectives(walk: Walk, source: str) -> list[Trap]:
    """Traps 1 and 5: collectives only some ranks reach."""
    hits: list[tuple[CallSite, str]] = []
    for site in walk.calls:
        if not site.conditions:
            continue
        kind = collective_kind(walk, site.node)
        if kind is None or kind.split(" ")[0] in site.balanced:
            continue
        hits.append((site, kind))
    paired = _paired_barriers(hits)
    found: list[Trap] = []
    for site, kind in hits:
        if id(site) in paired:
            continue
        base = kind.split(" ")[0]
        if base in SAVE_CALLS:
            found.append(Trap(site.node.lineno, "SCRIPT_SAVE_ON_ONE_RANK",
                              f"{kind} runs only where {_guard(site)} holds: it is a collective, the other ranks never "
                              "join it and the job hangs until the NCCL timeout",
                              f"Call {last(site.qualname)}() on every rank (it writes from the ranks that must write); "
                              "keep only prints and logging under the rank check."))
        else:
            found.append(Trap(site.node.lineno, "SCRIPT_COLLECTIVE_IN_RANK_BRANCH",
                              f"{kind} runs only where {_guard(site)} holds: every rank of the group must call it, "
                              "so the ranks that skip the branch leave the others waiting",
                              f"Move {kind.split(' ')[0]}() out of the rank-dependent branch (or call it in every "
                              "branch)."))
    return found


def _paired_barriers(hits: list[tuple[CallSite, str]]) -> set[int]:
    """Barriers of one function under two different rank tests: the rank-0-first pattern, balanced."""
    by_scope: dict[tuple[str, str], set[int]] = {}
    for site, kind in hits:
        if kind in ("barrier", "monitored_barrier", "wait_for_everyone"):
            by_scope.setdefault((site.scope, kind), set()).add(site.conditions[-1].line)
    paired: set[int] = set()
    for site, kind in hits:
        lines = by_scope.get((site.scope, kind), set())
        if len(lines) > 1:
            paired.add(id(site))
    return paired


def device_placement(walk: Walk, source: str) -> list[Trap]:
    """Trap 2: NCCL without set_device/device_id, and DDP without device_ids."""
    names = walk.names
    inits = [s for s in walk.calls if last(s.qualname) == "init_process_group"]
    managed = any(last(s.qualname) in ("initialize", "Accelerator", "Trainer", "init_distributed")
                  and s.qualname.split(".")[0] in ("deepspeed", "accelerate", "transformers")
                  for s in walk.calls)
    sets_device = [s for s in walk.calls if last(s.qualname) in ("set_device", "set_device_index")
                   or s.qualname in ("torch.cuda.device", "torch.set_default_device")]
    found: list[Trap] = []
    for site in sets_device:
        arg = site.node.args[0] if site.node.args else None
        if last(site.qualname) == "set_device" and isinstance(arg, ast.Constant) and isinstance(arg.value, int):
            found.append(Trap(site.node.lineno, "SCRIPT_FIXED_DEVICE",
                              f"{line_text(source, site.node.lineno)}: every rank selects GPU {arg.value}",
                              "Use torch.cuda.set_device(int(os.environ['LOCAL_RANK']))."))
    device_id = any(any(k.arg == "device_id" for k in s.node.keywords) for s in inits)
    for site in inits:
        backend = _backend(site.node)
        strings = names.strings_of(backend) if backend is not None else {"nccl"}
        if not any("nccl" in text for text in strings) or managed or sets_device or device_id:
            continue
        found.append(Trap(site.node.lineno, "SCRIPT_NO_SET_DEVICE",
                          "init_process_group with NCCL, and no torch.cuda.set_device(LOCAL_RANK) or device_id= in "
                          "the script: every rank's .cuda() / 'cuda' tensors land on cuda:0",
                          "Call torch.cuda.set_device(local_rank) before init_process_group, or pass "
                          "device_id=torch.device('cuda', local_rank)."))
    on_gpu = "cuda" in source or "nccl" in source
    for site in walk.calls:
        if last(site.qualname) != "DistributedDataParallel" or managed:
            continue
        ids = next((k.value for k in site.node.keywords if k.arg == "device_ids"), None)
        if ids is None and len(site.node.args) > 1:
            ids = site.node.args[1]
        if ids is None and on_gpu and not sets_device and not device_id:
            found.append(Trap(site.node.lineno, "SCRIPT_DDP_NO_DEVICE_IDS",
                              "DistributedDataParallel without device_ids and no set_device: every rank's model is "
                              "on cuda:0, so all ranks share one GPU",
                              "Call torch.cuda.set_device(local_rank), move the model to it and pass "
                              "device_ids=[local_rank]."))
        elif isinstance(ids, (ast.List, ast.Tuple)) and ids.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, int) for e in ids.elts):
            found.append(Trap(site.node.lineno, "SCRIPT_DDP_FIXED_DEVICE",
                              f"DistributedDataParallel(device_ids={ast.unparse(ids)}): every rank uses the same GPU",
                              "Pass device_ids=[local_rank]."))
    return found


def _backend(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "backend":
            return keyword.value
    return call.args[0] if call.args else None


def sampler_epochs(walk: Walk, source: str) -> list[Trap]:
    """Trap 3: DistributedSampler(shuffle=True) and no set_epoch in a loop."""
    samplers = [s for s in walk.calls if last(s.qualname) == "DistributedSampler"]
    in_loop = any(last(s.qualname) == "set_epoch" and s.in_loop for s in walk.calls)
    anywhere = any(last(s.qualname) == "set_epoch" for s in walk.calls)
    found: list[Trap] = []
    for site in samplers:
        shuffle = next((k.value for k in site.node.keywords if k.arg == "shuffle"), None)
        if isinstance(shuffle, ast.Constant) and shuffle.value is False:
            continue
        if in_loop:
            continue
        where = "outside any loop" if anywhere else "nowhere"
        found.append(Trap(site.node.lineno, "SCRIPT_SAMPLER_NO_SET_EPOCH",
                          f"DistributedSampler shuffles, but set_epoch is called {where}: every epoch repeats the "
                          "same order on every rank",
                          "Call sampler.set_epoch(epoch) at the start of each epoch of the training loop."))
    return found


def fsdp_rank0_save(walk: Walk, source: str) -> list[Trap]:
    """Trap 4: torch.save of an FSDP model's state_dict() on rank 0."""
    wrappers = [s for s in walk.calls if last(s.qualname) in ("FullyShardedDataParallel", "fully_shard")]
    if not wrappers:
        return []
    models = _fsdp_models(walk, wrappers)
    markers = {last(s.qualname) for s in walk.calls} | {
        n.attr for n in ast.walk(walk.tree) if isinstance(n, ast.Attribute)}
    full = bool(markers & FULL_STATE_MARKERS) or any(
        k.arg == "full_state_dict" and isinstance(k.value, ast.Constant) and k.value.value is True
        for s in walk.calls for k in s.node.keywords)
    dcp = any(s.qualname.startswith("torch.distributed.checkpoint.") for s in walk.calls)
    found: list[Trap] = []
    for site in walk.calls:
        if site.qualname != "torch.save" or not site.conditions or not site.node.args:
            continue
        state = _state_dict_of(walk, site.node.args[0], models)
        if state is None:
            continue
        state_site = next((s for s in walk.calls if s.node is state), None)
        gathered_on_one_rank = state_site is None or bool(state_site.conditions)
        if not full and not dcp:
            found.append(Trap(site.node.lineno, "SCRIPT_FSDP_SHARD_SAVE",
                              f"torch.save of an FSDP model's state_dict() where {_guard(site)} holds: rank 0 writes "
                              "its own shard, not the model",
                              "Save with torch.distributed.checkpoint (dcp.save on every rank), or gather a full "
                              "state dict on every rank (get_model_state_dict(model, options=StateDictOptions("
                              "full_state_dict=True, cpu_offload=True))) and torch.save it on rank 0."))
        elif full and gathered_on_one_rank:
            found.append(Trap(state.lineno, "SCRIPT_FSDP_STATE_DICT_ON_ONE_RANK",
                              f"the full state_dict() of an FSDP model is gathered where {_guard(site)} holds: "
                              "gathering is a collective, the other ranks never join and the job hangs",
                              "Build the state dict on every rank, then torch.save it on rank 0 only."))
    return found


def _fsdp_models(walk: Walk, wrappers: list[CallSite]) -> set[str]:
    models: set[str] = {"model", "module"}
    for name, values in walk.names.assignments.items():
        if any(isinstance(v, ast.Call) and last(walk.names.qualname(v.func)) in ("FullyShardedDataParallel",
                                                                                 "fully_shard") for v in values):
            models.add(name)
    for site in wrappers:
        if last(site.qualname) == "fully_shard" and site.node.args and isinstance(site.node.args[0], ast.Name):
            models.add(site.node.args[0].id)
    return models


def _state_dict_of(walk: Walk, arg: ast.expr, models: set[str]) -> ast.Call | None:
    """The ``model.state_dict()`` call ``arg`` holds (directly, or through a variable assigned from it)."""
    for node in ast.walk(arg):
        if _is_model_state_dict(node, models):
            assert isinstance(node, ast.Call)
            return node
    if isinstance(arg, ast.Name):
        for value in walk.names.assignments.get(arg.id, []):
            for node in ast.walk(value):
                if _is_model_state_dict(node, models):
                    assert isinstance(node, ast.Call)
                    return node
    return None


def _is_model_state_dict(node: ast.AST, models: set[str]) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict"):
        return False
    receiver = node.func.value
    if isinstance(receiver, ast.Name):
        return receiver.id in models
    return isinstance(receiver, ast.Attribute) and receiver.attr in models


def resumes_from_checkpoint(walk: Walk) -> bool:
    """True when the script restores state (load_checkpoint, torch.load, dcp.load, resume_from_checkpoint=...)."""
    for site in walk.calls:
        name = last(site.qualname)
        if name in RESUME_CALLS or site.qualname in ("torch.load", "torch.distributed.checkpoint.load"):
            return True
        if any(k.arg == "resume_from_checkpoint" for k in site.node.keywords):
            return True
    return False
