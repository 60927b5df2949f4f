"""The traps about who writes a checkpoint, and whether the job can resume from one.

1. An FSDP model's ``state_dict()`` saved with ``torch.save`` on rank 0 without DCP or a full
   state dict: rank 0 writes its own shard, not the model; with ``FULL_STATE_DICT`` the
   ``state_dict()`` call is itself a collective and must not be inside the rank-0 branch.
2. Every rank writing the same checkpoint file: ``torch.save(state, "checkpoint.pth.tar")``
   reached by every rank of a distributed job, the path the same on each (DeepSpeedExamples
   ``training/imagenet/main.py`` saves under ``args.gpu is None``, true on every rank). Each
   rank truncates and rewrites the file while the others write it: a reader (or a restart) can
   find it torn, and the job writes it N times.
"""

from __future__ import annotations

import ast

from preflight.judge.script_traps.facts import ProgramFacts
from preflight.judge.script_traps.names import last
from preflight.judge.script_traps.scan import CallSite, Walk
from preflight.judge.script_traps.traps import Trap

RESUME_CALLS = frozenset({"load_checkpoint", "load_state", "load_state_dict", "set_state_dict",
                          "set_model_state_dict", "set_optimizer_state_dict", "load_model"})
"""Calls that restore training state (``torch.load``/``dcp.load`` are matched by module)."""

FULL_STATE_MARKERS = frozenset({"FullStateDictConfig", "FULL_STATE_DICT", "get_model_state_dict", "get_state_dict",
                                "full_optim_state_dict"})
BUFFERS = frozenset({"BytesIO", "StringIO", "buffer", "buf", "f", "fp", "fh", "handle", "stream"})


def _guard(site: CallSite) -> str:
    cond = site.conditions[-1]
    return f"`{cond.text}` (line {cond.line})"


def _path_of(site: CallSite) -> str:
    return "" if site.module.is_script else site.module.path


def fsdp_rank0_save(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Trap 1: torch.save of an FSDP model's state_dict() on rank 0."""
    wrappers = [s for s in walk.calls if last(s.qualname) in ("FullyShardedDataParallel", "fully_shard")]
    if not wrappers:
        return []
    models = _fsdp_models(walk, wrappers)
    markers = {last(s.qualname) for s in walk.calls} | {
        n.attr for m in walk.program.all_modules() for n in ast.walk(m.tree) if isinstance(n, ast.Attribute)}
    full = bool(markers & FULL_STATE_MARKERS) or any(
        k.arg == "full_state_dict" and isinstance(k.value, ast.Constant) and k.value.value is True
        for s in walk.calls for k in s.node.keywords)
    dcp = any(s.qualname.startswith("torch.distributed.checkpoint.") for s in walk.calls)
    found: list[Trap] = []
    for site in walk.calls:
        if site.qualname != "torch.save" or not site.conditions or not site.node.args:
            continue
        state = _state_dict_of(site, site.node.args[0], models)
        if state is None:
            continue
        state_site = next((s for s in walk.calls if s.node is state), None)
        gathered_on_one_rank = state_site is None or bool(state_site.conditions)
        if not full and not dcp:
            found.append(Trap(site.line, "SCRIPT_FSDP_SHARD_SAVE",
                              f"torch.save of an FSDP model's state_dict() where {_guard(site)} holds: rank 0 writes "
                              "its own shard, not the model",
                              "Save with torch.distributed.checkpoint (dcp.save on every rank), or gather a full "
                              "state dict on every rank (get_model_state_dict(model, options=StateDictOptions("
                              "full_state_dict=True, cpu_offload=True))) and torch.save it on rank 0.",
                              _path_of(site), False, "the checkpoint holds 1/N of the model: it cannot be resumed"))
        elif full and gathered_on_one_rank:
            found.append(Trap(state.lineno, "SCRIPT_FSDP_STATE_DICT_ON_ONE_RANK",
                              f"the full state_dict() of an FSDP model is gathered where {_guard(site)} holds: "
                              "gathering is a collective, the other ranks never join",
                              "Build the state dict on every rank, then torch.save it on rank 0 only.",
                              _path_of(site), False,
                              "the job hangs at the first checkpoint until the collective timeout"))
    return found


def _fsdp_models(walk: Walk, wrappers: list[CallSite]) -> set[str]:
    models: set[str] = {"model", "module"}
    for module in walk.program.all_modules():
        for name, values in module.names.assignments.items():
            if any(isinstance(v, ast.Call) and last(module.names.qualname(v.func)) in ("FullyShardedDataParallel",
                                                                                       "fully_shard") for v in values):
                models.add(name)
    for site in wrappers:
        if last(site.qualname) == "fully_shard" and site.node.args and isinstance(site.node.args[0], ast.Name):
            models.add(site.node.args[0].id)
    return models


def _state_dict_of(site: CallSite, arg: ast.expr, models: set[str]) -> ast.Call | None:
    """The ``model.state_dict()`` call ``arg`` holds (directly, or through a variable assigned from it)."""
    for node in ast.walk(arg):
        if _is_model_state_dict(node, models):
            assert isinstance(node, ast.Call)
            return node
    if isinstance(arg, ast.Name):
        for value in site.module.names.assignments.get(arg.id, []):
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


def same_file_every_rank(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Trap 2: torch.save to one path from every rank of a distributed job."""
    if facts.distributed is None:
        return []
    found: list[Trap] = []
    seen: set[tuple[str, int]] = set()
    for site in walk.calls:
        if site.qualname != "torch.save" or not site.reached or site.conditions or len(site.node.args) < 2:
            continue
        key = (site.module.path, site.line)
        if key in seen:
            continue
        seen.add(key)
        target = site.node.args[1]
        if _buffer(site, target) or any(walk.ranks.varies(n, site.module) for n in ast.walk(target)
                                        if isinstance(n, (ast.Name, ast.Attribute, ast.Call))):
            continue
        path = _path_text(site, target)
        called = next((f for f in reversed(site.chain) if f.path == walk.script.path), None)
        via = f" (reached from line {called.line}, on every rank)" if called is not None and \
            site.module.is_script and called.line != site.line else ""
        found.append(Trap(site.line, "SCRIPT_SAME_FILE_EVERY_RANK",
                          f"torch.save to {path}{via} runs on every rank, to the same path: each rank truncates and "
                          "rewrites the file while the others write it",
                          "Save on one rank (if dist.get_rank() == 0: torch.save(...)), then dist.barrier() before "
                          "anyone reads it; or put the rank in the file name.",
                          _path_of(site), False,
                          "a torn checkpoint when ranks overlap (a restart cannot load it), and N times the writes"))
    return found


def _buffer(site: CallSite, target: ast.expr) -> bool:
    """``torch.save(obj, io.BytesIO())``, ``torch.save(obj, buffer)``, ``with open(...) as f: torch.save(obj, f)``."""
    if isinstance(target, ast.Call):
        return last(site.module.names.qualname(target.func)) in BUFFERS
    if isinstance(target, ast.Name):
        if target.id in BUFFERS:
            return True
        return any(isinstance(v, ast.Call) and last(site.module.names.qualname(v.func)) in BUFFERS
                   for v in site.module.names.assignments.get(target.id, []))
    return False


def _path_text(site: CallSite, target: ast.expr) -> str:
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return repr(target.value)
    if isinstance(target, ast.Name):
        for value in site.module.names.assignments.get(target.id, []):
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return f"{target.id} ({value.value!r})"
        for function in (site.module.functions.get(site.scope),):
            if function is not None:
                names = [a.arg for a in function.args.args]
                defaults = function.args.defaults
                if target.id in names and defaults:
                    index = names.index(target.id) - (len(names) - len(defaults))
                    if 0 <= index < len(defaults):
                        default = defaults[index]
                        if isinstance(default, ast.Constant) and isinstance(default.value, str):
                            return f"{target.id} ({default.value!r})"
    text = ast.unparse(target)
    return text if len(text) <= 50 else text[:47] + "..."


def resumes_from_checkpoint(walk: Walk) -> bool:
    """True when the script restores state (load_checkpoint, torch.load, dcp.load, resume_from_checkpoint=...)."""
    for site in walk.calls:
        name = last(site.qualname)
        if name in RESUME_CALLS or site.qualname in ("torch.load", "torch.distributed.checkpoint.load"):
            return True
        if any(k.arg == "resume_from_checkpoint" for k in site.node.keywords):
            return True
    return False
