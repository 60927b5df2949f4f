"""Facts about the whole program that the traps and the launch judge read.

* distributed: it joins a process group (``init_process_group``, ``deepspeed.initialize``,
  ``DistributedDataParallel``, FSDP, ``mp.spawn`` ...);
* sharded: it shards the model's parameters (``fully_shard``, ``FullyShardedDataParallel``,
  Lightning's ``FSDPStrategy``/``ModelParallelStrategy``, ``deepspeed.zero.Init``, a ZeRO-3
  config written in the script): a forward pass gathers parameters from every rank;
* deepspeed_or_fsdp: the script is written to run under DeepSpeed or FSDP (for Accelerate's
  ``save_state``, which is a collective only there);
* spawns: it starts its own processes (``mp.spawn``, ``fabric.launch``), so ``python train.py``
  runs several ranks;
* arguments: how it reads its command line: ``argparse`` with ``parse_args()`` refuses an
  unknown ``--local-rank=N``; ``parse_known_args``, ``HfArgumentParser`` (it declares
  ``--local_rank`` and ``--local-rank``), Fire, Hydra, jsonargparse or ``sys.argv`` read by hand
  are *tolerant* or unknown, and never judged;
* pipeline stages: ``PipelineModule(num_stages=...)`` as a number or an argparse option.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from preflight.judge.script_traps.names import last
from preflight.judge.script_traps.program import Program

DIST_INIT = frozenset({"init_process_group", "DistributedDataParallel", "FullyShardedDataParallel", "fully_shard",
                       "init_distributed"})
DIST_INIT_QUALIFIED = ("deepspeed.initialize", "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
SHARDING_CALLS = frozenset({"fully_shard", "FullyShardedDataParallel", "FSDPStrategy", "ModelParallelStrategy",
                            "FullyShardedDataParallelPlugin"})
PARALLEL_STRATEGIES = frozenset({"DDPStrategy", "DeepSpeedStrategy", "FSDPStrategy", "ModelParallelStrategy"})
SHARDING_STRATEGIES = ("fsdp", "deepspeed_stage_3")
"""Lightning/Fabric ``strategy=`` strings that shard parameters."""

Mode = Literal["argparse", "tolerant", "none"]


@dataclass(frozen=True, slots=True)
class Where:
    """A place in the program: a module path and a line."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Argument:
    """One ``add_argument`` of the script's parser: its option strings, its dest and its default."""

    options: tuple[str, ...]
    dest: str
    default: object = None


@dataclass(frozen=True, slots=True)
class ArgFacts:
    """How the script reads its command line (``mode``), where, and the options argparse declares."""

    mode: Mode
    where: Where | None
    arguments: tuple[Argument, ...] = ()
    why: str = ""

    @property
    def options(self) -> frozenset[str]:
        return frozenset(o for a in self.arguments for o in a.options)

    def accepts(self, word: str) -> bool:
        """Would this parser take ``--name=value``? Exact option, or (argparse's abbreviation) a unique prefix."""
        if self.mode != "argparse":
            return True
        name = word.split("=", 1)[0]
        if name in self.options:
            return True
        return len([o for o in self.options if o.startswith(name)]) == 1

    def value(self, dest: str, script_args: Sequence[str]) -> object:
        """The value ``dest`` gets from ``script_args`` (the last one given), else its default."""
        argument = next((a for a in self.arguments if a.dest == dest), None)
        if argument is None:
            return None
        found = argument.default
        for index, word in enumerate(script_args):
            name, sep, attached = word.partition("=")
            if name in argument.options:
                found = attached if sep else (script_args[index + 1] if index + 1 < len(script_args) else None)
            elif len(name) > 2 and name[:2] in argument.options and not name.startswith("--"):
                found = name[2:]  # -p2
        return found


@dataclass(frozen=True, slots=True)
class PipelineStages:
    """``PipelineModule(num_stages=...)``: a number, or the argparse dest it reads."""

    where: Where
    count: int | None
    dest: str | None


@dataclass(frozen=True, slots=True)
class ProgramFacts:
    """What the whole program does, each with where it was seen."""

    distributed: Where | None
    sharded: Where | None
    deepspeed_or_fsdp: Where | None
    spawns: Where | None
    arguments: ArgFacts
    pipeline: PipelineStages | None


def _first(program: Program, names: frozenset[str], qualified: tuple[str, ...] = ()) -> Where | None:
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                qualname = module.names.qualname(node.func)
                if last(qualname) in names or any(qualname.startswith(q) for q in qualified):
                    return Where(module.path, node.lineno)
    return None


def _sharding_strategy(program: Program) -> Where | None:
    """``Fabric(strategy="fsdp")``, ``Trainer(strategy="deepspeed_stage_3")``."""
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    value = keyword.value
                    if keyword.arg == "strategy" and isinstance(value, ast.Constant) and isinstance(value.value, str) \
                            and value.value.lower().startswith(SHARDING_STRATEGIES):
                        return Where(module.path, node.lineno)
    return None


def _zero3_literal(program: Program) -> Where | None:
    """A ``"stage": 3`` inside a ``"zero_optimization"`` dict written in the script, or ``zero.Init``."""
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and module.names.qualname(node.func).endswith("zero.Init"):
                return Where(module.path, node.lineno)
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=False):
                    if isinstance(key, ast.Constant) and key.value == "zero_optimization" and \
                            isinstance(value, ast.Dict) and any(
                                isinstance(k, ast.Constant) and k.value == "stage" and isinstance(v, ast.Constant)
                                and v.value == 3 for k, v in zip(value.keys, value.values, strict=False)):
                        return Where(module.path, node.lineno)
    return None


def _deepspeed_or_fsdp(program: Program) -> Where | None:
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and (
                    last(module.names.qualname(node.func)) in ("DeepSpeedPlugin", "FullyShardedDataParallelPlugin")
                    or any(k.arg in ("deepspeed_plugin", "fsdp_plugin", "deepspeed") for k in node.keywords)):
                return Where(module.path, node.lineno)
            if isinstance(node, ast.Attribute) and node.attr in ("deepspeed_plugin", "fsdp_plugin", "DEEPSPEED", "FSDP",
                                                                 "is_deepspeed_enabled", "is_fsdp_enabled"):
                return Where(module.path, node.lineno)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(n == "deepspeed" or n.startswith(("deepspeed.", "torch.distributed.fsdp")) for n in names):
                    return Where(module.path, node.lineno)
    return None


def _spawns(program: Program) -> Where | None:
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call):
                continue
            qualname = module.names.qualname(node.func)
            name = last(qualname)
            if name in ("spawn", "start_processes") and ("multiprocessing" in qualname or qualname.startswith("mp.")):
                return Where(module.path, node.lineno)
            if name == "launch" and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and "fabric" in node.func.value.id.lower():
                return Where(module.path, node.lineno)
            if name == "notebook_launcher":
                return Where(module.path, node.lineno)
    return None


def _literal(node: ast.expr | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _arguments(program: Program) -> ArgFacts:
    """The parser the script reads its command line with, as far as the source says."""
    declared: list[Argument] = []
    parse: Where | None = None
    created = False
    tolerant: tuple[Where, str] | None = None
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and node.attr == "argv" and isinstance(node.value, ast.Name) and \
                    module.names.aliases.get(node.value.id) == "sys":
                tolerant = tolerant or (Where(module.path, node.lineno), "reads sys.argv itself")
            if not isinstance(node, ast.Call):
                continue
            qualname = module.names.qualname(node.func)
            name = last(qualname)
            if qualname in ("argparse.ArgumentParser", "ArgumentParser"):
                created = True
            if name == "add_argument":
                options = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
                if not options:
                    continue
                dest_kw = next((k.value for k in node.keywords if k.arg == "dest"), None)
                longs = [o for o in options if o.startswith("--")]
                dest = (_literal(dest_kw) if dest_kw is not None else None) or (
                    (longs[0] if longs else options[0]).lstrip("-").replace("-", "_"))
                default = _literal(next((k.value for k in node.keywords if k.arg == "default"), None))
                declared.append(Argument(options, str(dest), default))
            elif name == "parse_args" and isinstance(node.func, ast.Attribute) and not node.args:
                parse = parse or Where(module.path, node.lineno)
            elif name in ("parse_known_args", "parse_known_intermixed_args"):
                tolerant = tolerant or (Where(module.path, node.lineno), f"{name}() keeps unknown arguments")
            elif name == "HfArgumentParser" or qualname.startswith(("fire.", "hydra.", "jsonargparse.", "tyro.",
                                                                     "click.", "simple_parsing.")) \
                    or name in ("LightningCLI", "CLI"):
                tolerant = tolerant or (Where(module.path, node.lineno), f"{name} parses the command line")
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if module.names.qualname(target).startswith(("hydra.", "click.")):
                        tolerant = tolerant or (Where(module.path, node.lineno), "hydra/click parse the command line")
    if tolerant is not None:
        return ArgFacts("tolerant", tolerant[0], tuple(declared), tolerant[1])
    if parse is not None and created:
        return ArgFacts("argparse", parse, tuple(declared), "argparse parse_args()")
    return ArgFacts("none", None, tuple(declared), "no command-line parser")


def _pipeline(program: Program) -> PipelineStages | None:
    for module in program.all_modules():
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Call) and last(module.names.qualname(node.func)) == "PipelineModule"):
                continue
            stages = next((k.value for k in node.keywords if k.arg == "num_stages"), None)
            where = Where(module.path, node.lineno)
            value = _literal(stages)
            if isinstance(value, int) and not isinstance(value, bool):
                return PipelineStages(where, value, None)
            if isinstance(stages, ast.Attribute) and isinstance(stages.value, ast.Name):
                return PipelineStages(where, None, stages.attr)
            return PipelineStages(where, None, None)
    return None


def program_facts(program: Program) -> ProgramFacts:
    """Every program-wide fact, each found once."""
    sharded = _first(program, SHARDING_CALLS) or _sharding_strategy(program) or _zero3_literal(program)
    return ProgramFacts(
        distributed=_first(program, DIST_INIT | PARALLEL_STRATEGIES, DIST_INIT_QUALIFIED) or sharded,
        sharded=sharded,
        deepspeed_or_fsdp=sharded or _deepspeed_or_fsdp(program),
        spawns=_spawns(program),
        arguments=_arguments(program),
        pipeline=_pipeline(program),
    )
