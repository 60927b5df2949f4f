"""What the names in a training script refer to: imports, collectives, rank tests.

Read from the script's ``ast`` only. ``dist.barrier`` is ``torch.distributed.barrier`` when the
script did ``import torch.distributed as dist``; a test is *rank-dependent* when it reads a rank
(``rank``, ``local_rank``, ``dist.get_rank()``, ``os.environ["RANK"]``, ``accelerator.is_main_process``
...) directly or through a variable assigned from one (``master_process = ddp_rank == 0``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

COLLECTIVES = frozenset({
    "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
    "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list", "new_group",
})
"""``torch.distributed`` (and ``deepspeed.comm``) calls every rank of the group must make."""

DIST_MODULES = ("torch.distributed", "deepspeed.comm")

ENGINE_COLLECTIVES = frozenset({"save_checkpoint", "load_checkpoint", "save_16bit_model"})
"""DeepSpeed engine methods that are collectives (its docs: call save_checkpoint on every process)."""

ACCELERATE_COLLECTIVES = frozenset({"save_state", "load_state", "wait_for_everyone", "gather", "gather_for_metrics",
                                    "reduce", "pad_across_processes"})
"""Accelerate's ``Accelerator`` methods that synchronise all processes."""

SAVE_CALLS = frozenset({"save_checkpoint", "save_16bit_model", "save_state"})

RANK_NAME = re.compile(r"^(global_|local_|node_|ddp_|dist_|my_|process_|proc_|gpu_)?rank$")
RANK_FLAGS = frozenset({
    "is_main_process", "is_local_main_process", "is_world_process_zero", "is_local_process_zero", "is_master",
    "master_process", "is_main", "main_process", "is_rank_zero", "is_rank0", "rank0", "rank_zero", "is_global_zero",
    "process_index", "local_process_index", "global_rank", "is_chief", "is_leader",
})
RANK_FUNCTIONS = frozenset({"get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank",
                            "is_main_process", "is_world_process_zero", "is_local_main_process", "is_rank_zero"})
RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID",
                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"})
RANK_DECORATORS = frozenset({"rank_zero_only", "main_process_only", "on_main_process", "on_local_main_process",
                             "on_rank0"})
"""Decorators that run a function on one rank only (Lightning, Accelerate, common helpers)."""


class Names:
    """Import aliases and rank-dependent variables of one module."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.rank_vars: set[str] = set()
        self.accelerators: set[str] = set()
        self.assignments: dict[str, list[ast.expr]] = {}
        simple: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for item in node.names:
                    if item.asname:
                        self.aliases[item.asname] = item.name
                    else:
                        root = item.name.split(".")[0]
                        self.aliases.setdefault(root, root)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for item in node.names:
                    self.aliases[item.asname or item.name] = f"{node.module}.{item.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in _target_names(target):
                        self.assignments.setdefault(name, []).append(node.value)
                    if isinstance(target, (ast.Name, ast.Attribute)):
                        simple.setdefault(next(iter(_target_names(target))), []).append(node.value)
        for name, values in self.assignments.items():
            if any(self.qualname(v.func).endswith("Accelerator") for v in values if isinstance(v, ast.Call)):
                self.accelerators.add(name)
        for _ in range(2):  # flags assigned from a rank test, and one more step (a = rank == 0; b = a)
            found = {name for name, values in simple.items() if any(self._is_rank_value(v) for v in values)}
            self.rank_vars |= found

    def qualname(self, node: ast.expr) -> str:
        """``dist.barrier`` -> ``torch.distributed.barrier``; unresolved roots stay as written."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(self.aliases.get(node.id, node.id))
        elif isinstance(node, ast.Call):
            parts.append(self.qualname(node.func) + "()")
        else:
            parts.append("?")
        return ".".join(reversed(parts))

    def reads_rank(self, node: ast.AST, loop_names: frozenset[str] = frozenset()) -> bool:
        """True when the expression depends on which rank evaluates it.

        ``loop_names`` are loop variables in scope: ``for rank in range(world_size)`` visits every
        rank on every process, so a test on it is the same everywhere.
        """
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and child.id not in loop_names and self._rank_identifier(child.id):
                return True
            if isinstance(child, ast.Attribute) and self._rank_identifier(child.attr):
                return True
            if isinstance(child, ast.Call) and _last(self.qualname(child.func)) in RANK_FUNCTIONS:
                return True
            if isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value in RANK_ENV:
                return True
        return False

    def _is_rank_value(self, value: ast.expr) -> bool:
        """A value that *is* a rank or a rank test (``rank == 0``, ``int(os.environ["RANK"])``,
        ``args.local_rank``), not one that merely uses a rank (``shards[rank]``, ``Sampler(rank=rank)``)."""
        if isinstance(value, ast.Name):
            return self._rank_identifier(value.id)
        if isinstance(value, ast.Attribute):
            return self._rank_identifier(value.attr)
        if isinstance(value, ast.Subscript):
            key = value.slice
            return isinstance(key, ast.Constant) and key.value in RANK_ENV
        if isinstance(value, (ast.Compare, ast.BoolOp)):
            return self.reads_rank(value)
        if isinstance(value, ast.UnaryOp):
            return self._is_rank_value(value.operand)
        if isinstance(value, ast.IfExp):
            return self._is_rank_value(value.body) or self._is_rank_value(value.orelse)
        if isinstance(value, ast.Call):
            callee = last(self.qualname(value.func))
            if callee in RANK_FUNCTIONS:
                return True
            return callee in _CASTS and any(self._is_rank_value(a) or (isinstance(a, ast.Constant) and a.value
                                                                         in RANK_ENV) for a in value.args)
        return False

    def _rank_identifier(self, name: str) -> bool:
        return bool(RANK_NAME.match(name)) or name in RANK_FLAGS or name in self.rank_vars

    def strings_of(self, node: ast.expr) -> set[str]:
        """String constants an expression can take, following simple variables one step."""
        found = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if isinstance(node, ast.Name):
            for value in self.assignments.get(node.id, []):
                found |= {c.value for c in ast.walk(value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        return found


_CASTS = frozenset({"int", "bool", "str", "get", "getenv"})


def _target_names(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)


def _last(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def last(qualname: str) -> str:
    """The last component of a dotted name."""
    return _last(qualname)
