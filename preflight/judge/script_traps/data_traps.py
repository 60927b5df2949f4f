"""The traps about which data each rank trains on.

1. A training ``DistributedSampler`` (it shuffles by default) whose ``set_epoch`` is never
   called once per epoch: its order is seeded with ``seed + epoch``, so every epoch repeats the
   first epoch's order on every rank (torch ``utils/data/distributed.py``: "calling the
   set_epoch() method at the beginning of each epoch ... is necessary to make shuffling work
   properly across multiple epochs"). A ``set_epoch`` in a method the epoch loop calls counts;
   evaluation samplers (``shuffle=False``, ``val``/``test`` names, no-grad or ``evaluate``
   functions) do not need it; a sampler handed to code the scan cannot read (a trainer library)
   is not judged.
2. Every rank training on the same batches: a shuffling ``DataLoader`` with no
   ``DistributedSampler`` and no per-rank shard, in a job where every rank seeds torch with the
   same value (``torch.manual_seed(42)``): ``RandomSampler`` draws its order from torch's
   generator, so every rank draws the same permutation and N ranks compute N copies of one
   gradient (DeepSpeedExamples ``HelloDeepSpeed/train_bert_ds.py``, ``gan/gan_deepspeed_train.py``).
   Loaders handed to ``accelerator.prepare``/``fabric.setup_dataloaders`` or the Hugging Face
   ``Trainer`` are sharded by them; a seed that adds the rank gives each rank its own order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from preflight.judge.script_traps.facts import ProgramFacts
from preflight.judge.script_traps.names import last
from preflight.judge.script_traps.program import Module
from preflight.judge.script_traps.scan import CallSite, Walk, eval_name
from preflight.judge.script_traps.traps import Trap

SAFE_CONSUMERS = frozenset({"DataLoader", "iter", "enumerate", "len", "next", "zip", "tqdm", "print", "list",
                            "islice", "cycle", "RepeatingLoader", "InfiniteIterator", "set_epoch"})
"""Calls a sampler or loader can pass through without anyone else seeing it."""
SHARDING_LOADERS = frozenset({"prepare", "setup_dataloaders", "prepare_data_loader", "split_dataset_by_node",
                              "Trainer", "Seq2SeqTrainer", "SFTTrainer", "MpDeviceLoader"})
"""Calls that give each rank its own part of a loader (Accelerate, Fabric, datasets, the HF Trainer, XLA)."""
TORCH_SEEDS = frozenset({"manual_seed", "seed_everything", "set_seed", "manual_seed_all", "set_random_seed"})


def _parents(module: Module) -> dict[int, ast.AST]:
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(module.tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return parents


def _unique(sites: list[CallSite]) -> Iterator[CallSite]:
    seen: set[tuple[str, int, int]] = set()
    for site in sites:
        key = (site.module.path, site.line, site.node.col_offset)
        if key not in seen:
            seen.add(key)
            yield site


def _holders(node: ast.AST, parents: dict[int, ast.AST]) -> tuple[list[str], bool]:
    """Names a value is bound to (``x = ...``, ``self.x = ...``, a DataLoader that takes it), and whether it
    leaves its function (returned, stored on ``self``, handed to a call the scan cannot read)."""
    names: list[str] = []
    leaves = False
    current: ast.AST = node
    for _ in range(4):
        parent = parents.get(id(current))
        if parent is None:
            break
        if isinstance(parent, ast.keyword):
            parent = parents.get(id(parent), parent)
        if isinstance(parent, ast.Call) and last(_callee(parent)) == "DataLoader" and current is not parent.func:
            current = parent
            continue
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            for target in targets:
                for element in ast.walk(target):
                    if isinstance(element, ast.Name):
                        names.append(element.id)
                    elif isinstance(element, ast.Attribute):
                        names.append(element.attr)
                        leaves = leaves or isinstance(element.value, ast.Name) and element.value.id == "self"
            break
        if isinstance(parent, (ast.Return, ast.Yield)):
            leaves = True
            break
        if isinstance(parent, ast.Call):
            leaves = leaves or last(_callee(parent)) not in SAFE_CONSUMERS
            break
        if isinstance(parent, (ast.Dict, ast.Tuple, ast.List)):
            leaves = True
            break
        current = parent
    return names, leaves


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _escapes(walk: Walk, names: list[str]) -> bool:
    """A holder name handed to a call the scan cannot follow (a trainer, a library)."""
    wanted = set(names)
    for site in walk.calls:
        if _callee(site.node) in SAFE_CONSUMERS:
            continue
        for argument in (*site.node.args, *(k.value for k in site.node.keywords)):
            value = argument.value if isinstance(argument, ast.Starred) else argument
            if isinstance(value, ast.Name) and value.id in wanted or isinstance(value, ast.Attribute) and \
                    value.attr in wanted:
                if isinstance(site.node.func, ast.Name) and walk.program.function(site.module, site.node.func.id):
                    continue  # a local function: the walk follows it
                return True
    return False


def _dataset_name(call: ast.Call) -> str:
    value = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dataset"), None)
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
        return str(value.slice.value)
    return ""


def _for_evaluation(site: CallSite, holders: list[str]) -> bool:
    return site.in_eval or eval_name(site.scope) or any(eval_name(n) for n in holders) or \
        eval_name(_dataset_name(site.node))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def sampler_epochs(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Trap 1: a training DistributedSampler whose set_epoch never runs once per epoch."""
    samplers = [s for s in walk.calls if last(s.qualname) == "DistributedSampler"]
    epoch_calls = [s for s in walk.calls if last(s.qualname) == "set_epoch"]
    per_epoch = any(s.in_loop for s in epoch_calls)
    found: list[Trap] = []
    parents: dict[str, dict[int, ast.AST]] = {}
    for site in _unique(samplers):
        shuffle = _keyword(site.node, "shuffle")
        if isinstance(shuffle, ast.Constant) and shuffle.value is False:
            continue
        tree_parents = parents.setdefault(site.module.path, _parents(site.module))
        holders, leaves = _holders(site.node, tree_parents)
        if _for_evaluation(site, holders) or per_epoch:
            continue
        if not epoch_calls and (leaves or _escapes(walk, holders)):
            continue
        where = "outside the epoch loop" if epoch_calls else "nowhere"
        found.append(Trap(site.line, "SCRIPT_SAMPLER_NO_SET_EPOCH",
                          f"a training DistributedSampler shuffles, but set_epoch is called {where}: its order is "
                          "seeded with seed + epoch, so every epoch repeats the first epoch's order",
                          "Call sampler.set_epoch(epoch) at the start of each epoch of the training loop.",
                          "" if site.module.is_script else site.module.path, bool(epoch_calls),
                          "every epoch sees the data in the same order (a worse model for the same compute)"))
    return found


def same_batches(walk: Walk, facts: ProgramFacts) -> list[Trap]:
    """Trap 2: a shuffling DataLoader, no sampler, no shard, the same seed on every rank."""
    if facts.distributed is None or any(_callee(s.node) in SHARDING_LOADERS for s in walk.calls):
        return []
    seed = _uniform_seed(walk)
    if seed is None:
        return []
    found: list[Trap] = []
    parents: dict[str, dict[int, ast.AST]] = {}
    for site in _unique([s for s in walk.calls if last(s.qualname) == "DataLoader" and s.reached]):
        call = site.node
        shuffle = _keyword(call, "shuffle")
        if not (isinstance(shuffle, ast.Constant) and shuffle.value is True):
            continue
        if any(k.arg in ("sampler", "batch_sampler") or k.arg is None for k in call.keywords):
            continue
        holders, _ = _holders(call, parents.setdefault(site.module.path, _parents(site.module)))
        if _for_evaluation(site, holders) or _rank_dataset(walk, site):
            continue
        found.append(Trap(site.line, "SCRIPT_SAME_BATCHES_EVERY_RANK",
                          "DataLoader(shuffle=True) with no DistributedSampler and no per-rank shard, and every rank "
                          f"seeds torch the same way ({seed}): every rank draws the same permutation, so the ranks "
                          "train on identical batches",
                          "Pass sampler=DistributedSampler(dataset) (and drop shuffle=True; call set_epoch each "
                          "epoch), or hand the dataset to deepspeed.initialize(training_data=...) / the loader to "
                          "accelerator.prepare.",
                          "" if site.module.is_script else site.module.path, False,
                          "N ranks compute N copies of one gradient: the job pays for N GPUs and learns from the data "
                          "of one"))
    return found


def _uniform_seed(walk: Walk) -> str | None:
    """``torch.manual_seed(42) at line 860`` when torch is seeded and no seed differs between ranks."""
    first: str | None = None
    for site in _unique(walk.calls):
        name = last(site.qualname)
        if name not in TORCH_SEEDS or site.qualname.startswith(("np.", "numpy.", "random.")):
            continue
        device_specific = _keyword(site.node, "device_specific")
        arguments = [*site.node.args, *(k.value for k in site.node.keywords if k.arg != "device_specific")]
        if any(walk.ranks.varies(a, site.module) for a in arguments) or (
                isinstance(device_specific, ast.Constant) and device_specific.value is True):
            return None
        if first is None and arguments:
            where = f"line {site.line}" if site.module.is_script else f"{site.module.path}:{site.line}"
            first = f"{site.qualname}(...) at {where}"
    return first


def _rank_dataset(walk: Walk, site: CallSite) -> bool:
    """The dataset handed to the loader is built per rank (``Subset(ds, range(rank, n, world))``)."""
    value = site.node.args[0] if site.node.args else _keyword(site.node, "dataset")
    if value is None:
        return False
    values = [value, *(site.module.names.assignments.get(value.id, []) if isinstance(value, ast.Name) else [])]
    if any(walk.ranks.varies(node, site.module) for v in values for node in ast.walk(v)
           if isinstance(node, (ast.Name, ast.Attribute, ast.Call))):
        return True
    return any(_local_code_reads_rank(walk, site.module, call) for v in values for call in ast.walk(v)
               if isinstance(call, ast.Call) and isinstance(call.func, ast.Name))


def _local_code_reads_rank(walk: Walk, module: Module, call: ast.Call) -> bool:
    """A dataset built by the script's own class or function that reads the rank (a per-rank shard inside)."""
    assert isinstance(call.func, ast.Name)
    bodies: list[ast.AST] = []
    found = walk.program.function(module, call.func.id)
    if found is not None:
        bodies.append(found[1])
    cls = walk.program.local_class(module, call.func.id)
    if cls is not None:
        bodies.extend(cls[0].classes[cls[1]].values())
    where = cls[0] if cls is not None else found[0] if found is not None else module
    return any(walk.ranks.varies(node, where) for body in bodies for node in ast.walk(body)
               if isinstance(node, (ast.Name, ast.Attribute, ast.Call)))
