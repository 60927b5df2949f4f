"""Which values differ between ranks, and so which branches only some ranks take.

A value *differs between ranks* when it is a rank (``dist.get_rank()``, ``int(os.environ["RANK"])``,
``args.local_rank``, ``fabric.global_rank``, a parameter named ``rank``, the first argument
``mp.spawn`` passes), a rank flag (``accelerator.is_main_process``, ``trainer.args.should_save``), a
comparison of a rank with a constant (``rank == 0``, ``rank % 8 == 0``), or a name, ``self``
attribute or local function assigned (returning) one of these. A comparison with a sentinel that
asks "distributed at all?" is the same on every rank: nanoGPT's ``ddp = int(os.environ.get('RANK',
-1)) != -1``, ``local_rank > -1``, ``rank is None``. So are the world size, ``dist.is_initialized()``,
``torch.cuda.device_count()`` and the loop variable of ``for rank in range(world_size)``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from preflight.judge.script_traps.program import FunctionNode, Module, Program

RANK_NAME = re.compile(r"^(global_|local_|node_|ddp_|dist_|my_|process_|proc_|gpu_|device_|worker_)?rank(_id)?$")
RANK_FLAGS = frozenset({
    "is_main_process", "is_local_main_process", "is_world_process_zero", "is_local_process_zero", "is_master",
    "master_process", "is_main", "main_process", "is_rank_zero", "is_rank0", "rank0", "rank_zero", "is_global_zero",
    "process_index", "local_process_index", "global_rank", "is_chief", "is_leader", "should_save", "should_log",
    "is_master_process", "is_first_process", "rank_id",
})
RANK_FUNCTIONS = frozenset({
    "get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank", "get_ordinal", "get_local_ordinal",
    "is_main_process", "is_world_process_zero", "is_local_main_process", "is_rank_zero", "is_local_process_zero",
    "get_data_parallel_rank", "get_model_parallel_rank", "get_pipeline_model_parallel_rank",
    "get_tensor_model_parallel_rank", "get_process_index", "process_index", "is_master_ordinal", "rank",
    "local_rank", "global_rank",
})
RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID",
                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"})
SPAWNERS = frozenset({"spawn", "start_processes"})
"""``torch.multiprocessing.spawn(fn, ...)`` calls ``fn(process_index, *args)`` in each process."""

_PASS_THROUGH = frozenset({"int", "bool", "str", "float", "get", "getenv", "item", "tolist"})


def _minus_one(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return node.operand.value == 1
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return bool(node.elts) and all(_minus_one(e) or _none(e) for e in node.elts)
    return False


def _none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def sentinel_test(op: ast.cmpop, right: ast.expr) -> bool:
    """``x != -1``, ``x is None``, ``x > -1``, ``x >= 0``, ``x < 0``: "distributed at all?", not "which rank?"."""
    if _none(right) or _minus_one(right):
        return isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.Gt, ast.LtE, ast.In, ast.NotIn))
    if _zero(right):
        return isinstance(op, (ast.GtE, ast.Lt))
    return False


class RankValues:
    """The rank-dependent names, ``self`` attributes and local functions of a program."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.names: set[str] = set()
        self.attributes: set[str] = set()
        self.functions: set[int] = set()
        self._assigned: dict[str, list[ast.expr]] = {}
        self._attr_assigned: dict[str, list[ast.expr]] = {}
        self._returns: dict[int, tuple[Module, list[ast.expr]]] = {}
        self._calls: list[tuple[Module, ast.Call]] = []
        for module in program.all_modules():
            self._collect(module)
        self._spawned_parameters()
        for _ in range(4):
            before = (len(self.names), len(self.attributes), len(self.functions))
            self._settle()
            if (len(self.names), len(self.attributes), len(self.functions)) == before:
                break

    def _collect(self, module: Module) -> None:
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for element in _flatten(target):
                        if isinstance(element, ast.Name):
                            self._assigned.setdefault(element.id, []).append(node.value)
                        elif isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) and \
                                element.value.id in ("self", "cls"):
                            self._attr_assigned.setdefault(element.attr, []).append(node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                returns = [r.value for r in _own_returns(node) if r.value is not None]
                if returns:
                    self._returns[id(node)] = (module, returns)
            elif isinstance(node, ast.Call) and (node.args or node.keywords):
                self._calls.append((module, node))

    def _spawned_parameters(self) -> None:
        for module, call in self.program.calls_named(*SPAWNERS):
            if not call.args or not isinstance(call.args[0], ast.Name):
                continue
            found = self.program.function(module, call.args[0].id)
            if found is not None and found[1].args.args:
                self.names.add(found[1].args.args[0].arg)

    def _settle(self) -> None:
        for name, values in self._assigned.items():
            if any(self.varies(v, module=None) for v in values):
                self.names.add(name)
        for attr, values in self._attr_assigned.items():
            if any(self.varies(v, module=None) for v in values):
                self.attributes.add(attr)
        for key, (module, returns) in self._returns.items():
            if any(self.varies(v, module=module) for v in returns):
                self.functions.add(key)
        for module, call in self._calls:
            self._bind(module, call)

    def _bind(self, module: Module, call: ast.Call) -> None:
        """A rank passed to a local function makes its parameter a rank (``Trainer(model, rank)`` -> ``gpu_id``)."""
        varying = [i for i, a in enumerate(call.args) if self.varies(a, module)]
        keywords = {k.arg for k in call.keywords if k.arg and self.varies(k.value, module)}
        if not varying and not keywords:
            return
        for function, skip_self in self._callees(module, call):
            params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)][1 if skip_self else 0:]
            self.names.update(params[i] for i in varying if i < len(params))
            self.names.update(k for k in keywords if k in params or k in {a.arg for a in function.args.kwonlyargs})

    def _callees(self, module: Module, call: ast.Call) -> list[tuple[FunctionNode, bool]]:
        func = call.func
        if isinstance(func, ast.Name):
            found = self.program.function(module, func.id)
            if found is not None:
                return [(found[1], id(found[1]) in found[0].owner)]
            cls = self.program.local_class(module, func.id)
            if cls is not None and "__init__" in cls[0].classes[cls[1]]:
                return [(cls[0].classes[cls[1]]["__init__"], True)]
            return []
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return [(methods[func.attr], True) for methods in module.classes.values() if func.attr in methods]
        return []

    def _rank_name(self, name: str) -> bool:
        if name in self.names:
            return True
        if name in self._assigned:
            return False  # assigned, and none of its values differs between ranks
        return bool(RANK_NAME.match(name)) or name in RANK_FLAGS

    def _rank_attribute(self, attr: str) -> bool:
        if attr in self.attributes:
            return True
        if attr in self._attr_assigned:
            return False
        return bool(RANK_NAME.match(attr)) or attr in RANK_FLAGS

    def varies(self, node: ast.AST, module: Module | None, loop_names: Iterable[str] = ()) -> bool:
        """True when ``node`` can evaluate differently on different ranks."""
        loops = frozenset(loop_names)
        return self._varies(node, module, loops)

    def _varies(self, node: ast.AST, module: Module | None, loops: frozenset[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id not in loops and self._rank_name(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                return self._rank_attribute(node.attr)
            return bool(RANK_NAME.match(node.attr)) or node.attr in RANK_FLAGS
        if isinstance(node, ast.Subscript):
            key = node.slice
            if isinstance(key, ast.Constant) and key.value in RANK_ENV:
                return True
            return self._varies(node.value, module, loops) or self._varies(key, module, loops)
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if not any(self._varies(s, module, loops) for s in sides):
                return False
            return not all(sentinel_test(op, right) for op, right in zip(node.ops, node.comparators, strict=False))
        if isinstance(node, ast.BoolOp):
            return any(self._varies(v, module, loops) for v in node.values)
        if isinstance(node, ast.UnaryOp):
            return self._varies(node.operand, module, loops)
        if isinstance(node, ast.BinOp):
            return self._varies(node.left, module, loops) or self._varies(node.right, module, loops)
        if isinstance(node, ast.IfExp):
            return any(self._varies(n, module, loops) for n in (node.test, node.body, node.orelse))
        if isinstance(node, ast.JoinedStr):
            return any(self._varies(v, module, loops) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self._varies(node.value, module, loops)
        if isinstance(node, ast.Call):
            return self._call_varies(node, module, loops)
        return False

    def _call_varies(self, node: ast.Call, module: Module | None, loops: frozenset[str]) -> bool:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in RANK_FUNCTIONS:
            return True
        if name in _PASS_THROUGH:
            if any(isinstance(a, ast.Constant) and a.value in RANK_ENV for a in node.args[:1]):
                return True
            if name in ("get", "getenv"):
                return False
            inner = list(node.args)
            if isinstance(func, ast.Attribute):
                inner.append(func.value)
            return any(self._varies(a, module, loops) for a in inner)
        return any(id(target) in self.functions for target in self._local_functions(node, module))

    def _local_functions(self, node: ast.Call, module: Module | None) -> list[FunctionNode]:
        modules = [module] if module is not None else list(self.program.all_modules())
        found: list[FunctionNode] = []
        for where in modules:
            if isinstance(node.func, ast.Name):
                hit = self.program.function(where, node.func.id)
                if hit is not None:
                    found.append(hit[1])
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                if node.func.value.id in ("self", "cls"):
                    found.extend(methods[node.func.attr] for methods in where.classes.values()
                                 if node.func.attr in methods)
                else:
                    alias = self.program.module_alias(where, node.func.value.id)
                    if alias is not None and node.func.attr in alias.functions:
                        found.append(alias.functions[node.func.attr])
        return found


def _flatten(target: ast.expr) -> Iterable[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flatten(element)
    elif isinstance(target, ast.Starred):
        yield from _flatten(target.value)
    else:
        yield target


def _own_returns(function: FunctionNode) -> Iterable[ast.Return]:
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return):
            yield node
        pending.extend(ast.iter_child_nodes(node))

