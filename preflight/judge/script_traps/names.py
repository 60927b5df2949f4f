"""What the names in one module of a training script refer to: imports and the calls that synchronise ranks.

Read from the module's ``ast`` only. ``dist.barrier`` is ``torch.distributed.barrier`` when the
module did ``import torch.distributed as dist``. Which values differ between ranks is
:mod:`preflight.judge.script_traps.ranks`.
"""

from __future__ import annotations

import ast
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

RANK_DECORATORS = frozenset({"rank_zero_only", "main_process_only", "on_main_process", "on_local_main_process",
                             "on_rank0"})
"""Decorators that run a function on one rank only (Lightning, Accelerate, common helpers)."""


class Names:
    """Import aliases, assignments and Accelerator objects of one module."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.accelerators: set[str] = set()
        self.assignments: dict[str, list[ast.expr]] = {}
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
        for name, values in self.assignments.items():
            if any(self.qualname(v.func).endswith("Accelerator") for v in values if isinstance(v, ast.Call)):
                self.accelerators.add(name)

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

    def strings_of(self, node: ast.expr) -> set[str]:
        """String constants an expression can take, following simple variables one step."""
        found = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if isinstance(node, ast.Name):
            for value in self.assignments.get(node.id, []):
                found |= {c.value for c in ast.walk(value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        return found


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
