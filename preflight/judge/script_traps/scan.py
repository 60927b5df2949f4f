"""The trap scan: one walk over a script's ``ast`` with the rank conditions in force at each call.

A call is *rank-conditional* inside the body or ``else`` of an ``if`` whose test reads the rank,
after an ``if <rank test>: return/continue/break/raise`` in the same block, or in a function
decorated ``@rank_zero_only``. A collective there is balanced, and not a finding, when the other
branch of the same ``if`` makes the same collective, or (barriers only) when another
rank-conditional ``if`` of the same function makes it too: the "rank 0 works, the others wait"
pattern (``if rank != 0: barrier()`` ... ``if rank == 0: barrier()``). Calls to functions defined
in the script count with the collectives those functions make.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from preflight.judge.script_traps.names import (
    ACCELERATE_COLLECTIVES,
    COLLECTIVES,
    DIST_MODULES,
    ENGINE_COLLECTIVES,
    RANK_DECORATORS,
    Names,
    last,
)

EXITS = (ast.Return, ast.Continue, ast.Break, ast.Raise)


@dataclass(frozen=True, slots=True)
class RankCondition:
    """An enclosing rank test: its line and text."""

    line: int
    text: str


@dataclass(frozen=True, slots=True)
class CallSite:
    """One call with the rank conditions around it and the loops it is in."""

    node: ast.Call
    qualname: str
    conditions: tuple[RankCondition, ...]
    balanced: frozenset[str]
    in_loop: bool
    scope: str


@dataclass
class Walk:
    """Every call of the module, in source order, with its context."""

    names: Names
    tree: ast.Module
    lines: list[str] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    made_by: dict[str, frozenset[str]] = field(default_factory=dict)
    loops: dict[str, frozenset[str]] = field(default_factory=dict)
    """Loop variables of each scope (function name), which rank tests ignore."""
    """Collectives each of the script's functions makes (memoised)."""


def rank_test(names: Names, test: ast.expr, loop_names: frozenset[str] = frozenset()) -> bool:
    """A test that differs between ranks; ``local_rank != -1`` ("distributed at all?") and
    ``rank is None`` (an argument left out) do not."""
    if isinstance(test, ast.Compare) and all(_minus_one(c) or _none(c) for c in test.comparators):
        return False
    if isinstance(test, ast.BoolOp):
        return any(rank_test(names, value, loop_names) for value in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return rank_test(names, test.operand, loop_names)
    return names.reads_rank(test, loop_names)


def loop_targets(body: Sequence[ast.stmt]) -> frozenset[str]:
    """Names a ``for`` loop (or comprehension) binds in this block, nested functions excluded."""
    found: set[str] = set()
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            found |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        pending.extend(ast.iter_child_nodes(node))
    return frozenset(found)


def _none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _minus_one(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return node.operand.value == 1
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return bool(node.elts) and all(_minus_one(e) for e in node.elts)
    return False


def walk_module(tree: ast.Module, source: str) -> Walk:
    """Walk every statement, keeping the rank conditions and loops in force."""
    walk = Walk(Names(tree), tree, lines=source.splitlines())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            walk.functions.setdefault(node.name, node)
    walk.loops["<module>"] = loop_targets(tree.body)
    _block(walk, tree.body, (), frozenset(), False, "<module>", source)
    return walk


def _block(walk: Walk, body: Sequence[ast.stmt], conds: tuple[RankCondition, ...], balanced: frozenset[str],
           in_loop: bool, scope: str, source: str) -> None:
    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.If) and rank_test(walk.names, stmt.test, walk.loops.get(scope, frozenset())):
            cond = RankCondition(stmt.lineno, _text(walk.lines, stmt.test))
            then_kinds, else_kinds = collective_kinds(walk, stmt.body), collective_kinds(walk, stmt.orelse)
            _exprs(walk, [stmt.test], conds, balanced, in_loop, scope)
            _block(walk, stmt.body, (*conds, cond), frozenset(else_kinds), in_loop, scope, source)
            _block(walk, stmt.orelse, (*conds, cond), frozenset(then_kinds), in_loop, scope, source)
            if not stmt.orelse and stmt.body and isinstance(stmt.body[-1], EXITS):
                rest = body[index + 1:]
                _block(walk, rest, (*conds, RankCondition(stmt.lineno, f"not ({cond.text})")), frozenset(then_kinds),
                       in_loop, scope, source)
                return
            continue
        _statement(walk, stmt, conds, balanced, in_loop, scope, source)


def _statement(walk: Walk, stmt: ast.stmt, conds: tuple[RankCondition, ...], balanced: frozenset[str],
               in_loop: bool, scope: str, source: str) -> None:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        decorated = [d for d in stmt.decorator_list if last(walk.names.qualname(_callee(d))) in RANK_DECORATORS]
        label = f"@{last(walk.names.qualname(_callee(decorated[0])))}" if decorated else ""
        inner = (RankCondition(stmt.lineno, label),) if decorated else ()
        _exprs(walk, [*stmt.decorator_list, *stmt.args.defaults], conds, balanced, in_loop, scope)
        walk.loops[stmt.name] = loop_targets(stmt.body)
        _block(walk, stmt.body, inner, frozenset(), False, stmt.name, source)
        return
    if isinstance(stmt, ast.ClassDef):
        _block(walk, stmt.body, (), frozenset(), False, stmt.name, source)
        return
    loop = isinstance(stmt, (ast.For, ast.AsyncFor, ast.While))
    children = [child for child in ast.iter_child_nodes(stmt)]
    exprs = [c for c in children if isinstance(c, ast.expr)]
    _exprs(walk, exprs, conds, balanced, in_loop, scope)
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            _block(walk, block, conds, balanced, in_loop or (loop and name == "body"), scope, source)
    for handler in getattr(stmt, "handlers", []) or []:
        _block(walk, handler.body, conds, balanced, in_loop, scope, source)
    for case in getattr(stmt, "cases", []) or []:
        _block(walk, case.body, conds, balanced, in_loop, scope, source)
    for item in getattr(stmt, "items", []) or []:
        _exprs(walk, [item.context_expr], conds, balanced, in_loop, scope)


def _exprs(walk: Walk, exprs: Sequence[ast.AST], conds: tuple[RankCondition, ...], balanced: frozenset[str],
           in_loop: bool, scope: str) -> None:
    for expr in exprs:
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                walk.calls.append(CallSite(node, walk.names.qualname(node.func), conds, balanced, in_loop, scope))


def _callee(decorator: ast.expr) -> ast.expr:
    return decorator.func if isinstance(decorator, ast.Call) else decorator


def collective_kind(walk: Walk, call: ast.Call, seen: frozenset[str] = frozenset()) -> str | None:
    """The collective a call makes (``barrier``, ``save_checkpoint``, ``via save()`` ...), or None."""
    qualname = walk.names.qualname(call.func)
    name = last(qualname)
    module = qualname.rsplit(".", 1)[0] if "." in qualname else ""
    if name in COLLECTIVES and module in DIST_MODULES:
        return name
    if qualname.startswith("torch.distributed.checkpoint.") and name in ("save", "async_save", "load",
                                                                          "save_state_dict", "load_state_dict"):
        return f"dcp.{name}"
    if isinstance(call.func, ast.Attribute):
        if name in ENGINE_COLLECTIVES:
            return name
        receiver = call.func.value
        receiver_name = receiver.id if isinstance(receiver, ast.Name) else (
            receiver.attr if isinstance(receiver, ast.Attribute) else "")
        if name in ACCELERATE_COLLECTIVES and (receiver_name in walk.names.accelerators
                                               or "accelerator" in receiver_name.lower()):
            return name
    elif name in ENGINE_COLLECTIVES and qualname.startswith(("deepspeed.", "megatron.")):
        return name
    local = name if isinstance(call.func, ast.Name) or (
        isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
        and call.func.value.id in ("self", "cls")) else None
    if local and local in walk.functions and local not in seen:
        if local not in walk.made_by:
            walk.made_by[local] = frozenset(collective_kinds(walk, walk.functions[local].body, seen | {local}))
        inner = walk.made_by[local]
        if inner:
            return f"{sorted(inner)[0]} (via {local}())"
    return None


def collective_kinds(walk: Walk, body: Sequence[ast.stmt], seen: frozenset[str] = frozenset()) -> set[str]:
    """Collectives a block makes, directly or through the script's own functions (base names)."""
    found: set[str] = set()
    for node in _calls(body):
        kind = collective_kind(walk, node, seen)
        if kind:
            found.add(kind.split(" ")[0])
    return found


def _calls(body: Sequence[ast.stmt]) -> Iterator[ast.Call]:
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                yield node


def _text(lines: Sequence[str], node: ast.expr) -> str:
    """The source of an expression on one line, shortened (the parsed lines, sliced once)."""
    start, end = node.lineno, node.end_lineno or node.lineno
    if 0 < start <= end <= len(lines) and node.end_col_offset is not None:
        chunk = list(lines[start - 1:end])
        chunk[-1] = chunk[-1][:node.end_col_offset]
        chunk[0] = chunk[0][node.col_offset:]
        text = " ".join(" ".join(chunk).split())
    else:
        text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def line_text(source: str, line: int) -> str:
    """Source line ``line`` (1-based), stripped and shortened."""
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return text if len(text) <= 80 else text[:77] + "..."
