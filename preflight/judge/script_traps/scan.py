"""The trap scan's walk: every call the job makes, with the rank conditions, loops and no-grad regions around it.

The walk starts at the script's top level and follows calls the way the job runs them: into the
script's functions and methods (``self._run_epoch(epoch)``, ``trainer.train()`` of a local
``Trainer``), into functions imported from modules beside it, and into functions handed to
another call (``mp.spawn(main)``, ``fire.Fire(train)``). What is in force at a call is carried
in: a helper called inside ``if rank == 0:`` or inside the epoch loop has its calls under that
condition or in that loop. Functions nothing reaches are walked last, on their own.

A call is *rank-conditional* inside the body or ``else`` of an ``if`` whose test differs between
ranks (:mod:`preflight.judge.script_traps.ranks`), after ``if <rank test>: return/continue/break/
raise`` in the same block, or in a function decorated ``@rank_zero_only``. A collective there is
balanced when the other branch of the same ``if`` makes the same collective.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from preflight.judge.script_traps.names import (
    ACCELERATE_COLLECTIVES,
    COLLECTIVES,
    DIST_MODULES,
    ENGINE_COLLECTIVES,
    RANK_DECORATORS,
    last,
)
from preflight.judge.script_traps.program import FunctionNode, Module, Program
from preflight.judge.script_traps.ranks import RankValues

EXITS = (ast.Return, ast.Continue, ast.Break, ast.Raise)
MAX_DEPTH = 12
"""Calls followed from the top level at most (a training script's call chains are shallow)."""
MAX_ENTRIES = 500
"""Function bodies walked at most per program (the corpus needs 33 at most): a bound on fan-out under many rank
tests; functions past it are still walked once each, on their own."""
NO_GRAD = frozenset({"no_grad", "inference_mode"})
EVAL_WORDS = frozenset({"val", "dev", "test", "eval", "sample", "generate"})
EVAL_PREFIXES = ("eval", "valid", "generat", "inference", "predict", "testing")


@dataclass(frozen=True, slots=True)
class RankCondition:
    """An enclosing rank test: where it is, its text, and how deep in the call chain it applies."""

    line: int
    text: str
    path: str
    depth: int


@dataclass(frozen=True, slots=True)
class Frame:
    """One call on the way from the script's top level to a call site."""

    path: str
    line: int
    function: str


@dataclass(frozen=True, slots=True)
class CallSite:
    """One call, with what is in force around it as the job reaches it."""

    node: ast.Call
    qualname: str
    module: Module
    conditions: tuple[RankCondition, ...]
    balanced: frozenset[str]
    in_loop: bool
    in_eval: bool
    scope: str
    chain: tuple[Frame, ...]
    reached: bool
    """True when the walk from the top level reached it (False: in a function nothing calls)."""

    @property
    def line(self) -> int:
        return self.node.lineno

    def report_at(self) -> tuple[str, int]:
        """Where a rank-conditional finding is named: the call made inside the branch."""
        if not self.conditions:
            return self.module.path, self.node.lineno
        depth = self.conditions[-1].depth
        if depth >= len(self.chain):
            return self.module.path, self.node.lineno
        frame = self.chain[depth]
        return frame.path, frame.line

    def via(self) -> str:
        """`` in save() (utils.py:12)`` when the call sits in a function the reported line calls."""
        if not self.conditions or self.conditions[-1].depth >= len(self.chain):
            return ""
        return f" in {self.chain[-1].function}() ({self.module.path}:{self.node.lineno})"


@dataclass(frozen=True, slots=True)
class Context:
    """What is in force while a block is walked."""

    module: Module
    conditions: tuple[RankCondition, ...] = ()
    balanced: frozenset[str] = frozenset()
    in_loop: bool = False
    in_eval: bool = False
    scope: str = "<module>"
    chain: tuple[Frame, ...] = ()
    owner: str | None = None
    loops: frozenset[str] = frozenset()
    reached: bool = True


@dataclass
class Walk:
    """Every call of the program in the order the walk met it, with its context."""

    program: Program
    ranks: RankValues
    calls: list[CallSite] = field(default_factory=list)
    visited: set[int] = field(default_factory=set)
    memo: set[tuple[int, tuple[tuple[str, int], ...], bool, bool]] = field(default_factory=set)
    kinds_memo: dict[int, frozenset[str]] = field(default_factory=dict)
    loops_memo: dict[int, frozenset[str]] = field(default_factory=dict)

    @property
    def script(self) -> Module:
        return self.program.script


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


def walk_program(program: Program) -> Walk:
    """Walk the script from its top level, then from its entry points, then every function nothing reached.

    An entry point is a function of the script that nothing in the program calls (litgpt's
    ``setup``, called by the ``litgpt`` command): the walk from it is as the job runs it. A
    function only code outside the program calls is walked last, with ``reached`` false.
    """
    walk = Walk(program, RankValues(program))
    script = program.script
    _block(walk, script.tree.body, Context(script, loops=loop_targets(script.tree.body)))
    called = _called_names(program)
    functions = list(_functions_of(script))
    for owner, function in functions:
        if id(function) not in walk.visited and owner is None and function.name not in called:
            _enter(walk, script, function, owner, Context(script), None)
    for owner, function in functions:
        if id(function) not in walk.visited:
            _enter(walk, script, function, owner, Context(script, reached=False), None)
    return walk


def _called_names(program: Program) -> set[str]:
    """Names of functions the program calls directly (``f(...)``; handing ``f`` to a call does not count)."""
    return {node.func.id for module in program.all_modules() for node in ast.walk(module.tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _functions_of(module: Module) -> Iterator[tuple[str | None, FunctionNode]]:
    for function in module.functions.values():
        yield module.owner.get(id(function)), function
    for name, methods in module.classes.items():
        for method in methods.values():
            yield name, method


def rank_test(walk: Walk, test: ast.expr, ctx: Context) -> bool:
    """A test whose value differs between ranks."""
    return walk.ranks.varies(test, ctx.module, ctx.loops)


def _block(walk: Walk, body: Sequence[ast.stmt], ctx: Context) -> None:
    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.If) and rank_test(walk, stmt.test, ctx):
            cond = RankCondition(stmt.lineno, _text(ctx.module.lines, stmt.test), ctx.module.path, len(ctx.chain))
            then_kinds = collective_kinds(walk, ctx.module, stmt.body)
            else_kinds = collective_kinds(walk, ctx.module, stmt.orelse)
            _exprs(walk, [stmt.test], ctx)
            inner = (*ctx.conditions, cond)
            _block(walk, stmt.body, replace(ctx, conditions=inner, balanced=frozenset(else_kinds)))
            _block(walk, stmt.orelse, replace(ctx, conditions=inner, balanced=frozenset(then_kinds)))
            if not stmt.orelse and stmt.body and isinstance(stmt.body[-1], EXITS):
                negated = replace(cond, text=f"not ({cond.text})")
                _block(walk, body[index + 1:], replace(ctx, conditions=(*ctx.conditions, negated),
                                                       balanced=frozenset(then_kinds)))
                return
            continue
        _statement(walk, stmt, ctx)


def _statement(walk: Walk, stmt: ast.stmt, ctx: Context) -> None:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        _exprs(walk, [*stmt.decorator_list, *stmt.args.defaults], ctx)
        return
    if isinstance(stmt, ast.ClassDef):
        return
    loop = isinstance(stmt, (ast.For, ast.AsyncFor, ast.While))
    exprs = [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.expr)]
    _exprs(walk, exprs, ctx)
    no_grad = False
    for item in getattr(stmt, "items", []) or []:
        _exprs(walk, [item.context_expr], ctx)
        call = item.context_expr
        if isinstance(call, ast.Call) and last(ctx.module.names.qualname(call.func)) in NO_GRAD:
            no_grad = True
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            inner = replace(ctx, in_loop=ctx.in_loop or (loop and name == "body"), in_eval=ctx.in_eval or no_grad)
            _block(walk, block, inner)
    for handler in getattr(stmt, "handlers", []) or []:
        _block(walk, handler.body, ctx)
    for case in getattr(stmt, "cases", []) or []:
        _block(walk, case.body, ctx)


def _exprs(walk: Walk, exprs: Sequence[ast.AST], ctx: Context) -> None:
    for expr in exprs:
        for node in ast.walk(expr):
            if not isinstance(node, ast.Call):
                continue
            site = CallSite(node, ctx.module.names.qualname(node.func), ctx.module, ctx.conditions, ctx.balanced,
                            ctx.in_loop, ctx.in_eval, ctx.scope, ctx.chain, ctx.reached)
            walk.calls.append(site)
            for module, function, owner in _targets(walk, node, ctx):
                _enter(walk, module, function, owner, ctx, node)
            for argument in (*node.args, *(k.value for k in node.keywords)):
                if isinstance(argument, ast.Name):
                    found = walk.program.function(ctx.module, argument.id)
                    if found is not None:
                        _enter(walk, found[0], found[1], found[0].owner.get(id(found[1])), ctx, node)


def _targets(walk: Walk, call: ast.Call, ctx: Context) -> list[tuple[Module, FunctionNode, str | None]]:
    """The local functions a call runs: a function, a method of a local class, a constructor."""
    program, module = walk.program, ctx.module
    func = call.func
    if isinstance(func, ast.Name):
        found = program.function(module, func.id)
        if found is not None:
            return [(found[0], found[1], found[0].owner.get(id(found[1])))]
        cls = program.local_class(module, func.id)
        if cls is not None and "__init__" in cls[0].classes[cls[1]]:
            return [(cls[0], cls[0].classes[cls[1]]["__init__"], cls[1])]
        return []
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return []
    receiver = func.value.id
    if receiver in ("self", "cls") and ctx.owner is not None:
        methods = module.classes.get(ctx.owner, {})
        return [(module, methods[func.attr], ctx.owner)] if func.attr in methods else []
    alias = program.module_alias(module, receiver)
    if alias is not None:
        found = program.function(alias, func.attr)
        return [(found[0], found[1], None)] if found is not None else []
    for value in module.names.assignments.get(receiver, []):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            cls = program.local_class(module, value.func.id)
            if cls is not None and func.attr in cls[0].classes[cls[1]]:
                return [(cls[0], cls[0].classes[cls[1]][func.attr], cls[1])]
    return []


def _enter(walk: Walk, module: Module, function: FunctionNode, owner: str | None, ctx: Context,
           call: ast.Call | None) -> None:
    """Walk ``function``'s body as called from ``call`` under ``ctx``."""
    if len(ctx.chain) >= MAX_DEPTH or any(f.function == function.name for f in ctx.chain):
        return
    chain = (*ctx.chain, Frame(ctx.module.path, call.lineno, function.name)) if call is not None else ctx.chain
    conditions = ctx.conditions
    decorated = [d for d in function.decorator_list if last(module.names.qualname(_callee(d))) in RANK_DECORATORS]
    if decorated:
        label = f"@{last(module.names.qualname(_callee(decorated[0])))}"
        conditions = (*conditions, RankCondition(function.lineno, label, module.path, len(chain)))
    no_grad = any(last(module.names.qualname(_callee(d))) in NO_GRAD for d in function.decorator_list)
    in_eval = ctx.in_eval or no_grad or eval_name(function.name)
    key = (id(function), tuple((c.path, c.line) for c in conditions), ctx.in_loop, in_eval)
    if key in walk.memo or len(walk.memo) >= MAX_ENTRIES:
        return
    walk.memo.add(key)
    walk.visited.add(id(function))
    loops = walk.loops_memo.get(id(function))
    if loops is None:
        loops = walk.loops_memo[id(function)] = loop_targets(function.body)
    inner = Context(module, conditions, ctx.balanced, ctx.in_loop, in_eval, function.name, chain, owner, loops,
                    ctx.reached)
    defaults = [d for d in (*function.args.defaults, *function.args.kw_defaults) if d is not None]
    _exprs(walk, defaults, replace(inner, chain=ctx.chain))
    _block(walk, function.body, inner)


def eval_name(name: str) -> bool:
    """``validate``, ``evaluate``, ``test_loop``, ``val_loader``: a name for evaluation, not training."""
    tokens = [t for t in name.lower().split("_") if t]
    return any(t in EVAL_WORDS or t.startswith(EVAL_PREFIXES) for t in tokens)


def _callee(decorator: ast.expr) -> ast.expr:
    return decorator.func if isinstance(decorator, ast.Call) else decorator


def collective_kind(module: Module, call: ast.Call) -> str | None:
    """The collective this call makes itself (``barrier``, ``save_checkpoint``, ``dcp.save`` ...), or None."""
    qualname = module.names.qualname(call.func)
    name = last(qualname)
    owner = qualname.rsplit(".", 1)[0] if "." in qualname else ""
    if name in COLLECTIVES and owner in DIST_MODULES:
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
        if name in ACCELERATE_COLLECTIVES and (receiver_name in module.names.accelerators
                                               or "accelerator" in receiver_name.lower()):
            return name
        if name == "barrier" and receiver_name.lower() in ("fabric", "trainer", "strategy"):
            return name
    elif name in ENGINE_COLLECTIVES and qualname.startswith(("deepspeed.", "megatron.")):
        return name
    return None


def collective_kinds(walk: Walk, module: Module, body: Sequence[ast.stmt], depth: int = 0) -> set[str]:
    """Collectives a block makes, directly or through the program's own functions."""
    found: set[str] = set()
    for node in _calls(body):
        kind = collective_kind(module, node)
        if kind:
            found.add(kind)
            continue
        if depth >= 4:
            continue
        for target_module, function in _static_targets(walk.program, module, node):
            key = id(function)
            if key not in walk.kinds_memo:
                walk.kinds_memo[key] = frozenset()  # recursion guard
                walk.kinds_memo[key] = frozenset(collective_kinds(walk, target_module, function.body, depth + 1))
            found |= walk.kinds_memo[key]
    return found


def _static_targets(program: Program, module: Module, call: ast.Call) -> list[tuple[Module, FunctionNode]]:
    func = call.func
    if isinstance(func, ast.Name):
        found = program.function(module, func.id)
        return [found] if found is not None else []
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id in ("self", "cls"):
            return [(module, methods[func.attr]) for methods in module.classes.values() if func.attr in methods]
        alias = program.module_alias(module, func.value.id)
        if alias is not None:
            found = program.function(alias, func.attr)
            return [found] if found is not None else []
    return []


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


def line_text(lines: Sequence[str], line: int) -> str:
    """Source line ``line`` (1-based), stripped and shortened."""
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return text if len(text) <= 80 else text[:77] + "..."
