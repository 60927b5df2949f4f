"""DeepSpeed's installed version and CUDA rule, read from its files without importing it.

Importing ``deepspeed`` selects an accelerator and can touch CUDA, so the version comes from the
package metadata and the rule from ``op_builder/builder.py`` parsed with :mod:`ast`: the
``cuda_minor_mismatch_ok`` table (it grew release by release: DeepSpeed 0.15.0 lists 12.0-12.5,
master in 2025 lists 12.0-12.6, 12.8, 12.9) and whether the file knows ``DS_SKIP_CUDA_CHECK``
(added by DeepSpeed PR #3436). ``git_version_info_installed.py`` (written by DeepSpeed's
``setup.py``) says which ops were pre-built (``installed_ops``), for which accelerator
(``accelerator_name``) and against which torch (``torch_info``: ``version`` is torch's
``major.minor``, ``cuda_version`` its CUDA ``major.minor``, ``"0.0"`` when not recorded).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DS_BUILDER_FILES = ("deepspeed/ops/op_builder/builder.py", "op_builder/builder.py")
DS_INSTALL_INFO = "deepspeed/git_version_info_installed.py"


@dataclass(frozen=True, slots=True)
class DeepSpeedRule:
    """DeepSpeed's toolkit check as written in the installed ``op_builder/builder.py``."""

    minor_mismatch_ok: Mapping[int, tuple[str, ...]]
    honours_skip_env: bool
    source: str
    checked_in_jit: bool = False
    """``assert_no_cuda_mismatch`` is called outside ``builder()`` too (older releases called it from
    the JIT path, e.g. ``is_cuda_enable``); in 0.19.8 only ``CUDAOpBuilder.builder()`` calls it, the
    ahead-of-time path, so a JIT build never compares CUDA versions."""


@dataclass(frozen=True, slots=True)
class DeepSpeedFacts:
    """DeepSpeed's installed version and rule, read from its files (never imported)."""

    version: str | None
    skip_cuda_check: str | None
    rule: DeepSpeedRule | None = None
    rule_problem: str | None = None
    prebuilt_ops: tuple[str, ...] = ()
    """Ops compiled into the wheel (``DS_BUILD_OPS=1``): not JIT-built, no toolkit needed."""
    prebuilt_cuda: str | None = None
    """``torch_info["cuda_version"]`` the pre-built ops were compiled for; None when not recorded."""
    prebuilt_torch: str | None = None
    """``torch_info["version"]`` (torch ``major.minor``) DeepSpeed was installed against; None when not recorded."""
    prebuilt_accelerator: str | None = None
    """``accelerator_name`` of the install: pre-built ops load only on that accelerator."""
    accelerator_env: str | None = None
    """``DS_ACCELERATOR`` as set in the environment (it overrides DeepSpeed's own detection)."""

    @property
    def installed(self) -> bool:
        """True when the ``deepspeed`` distribution is installed."""
        return self.version is not None

    @property
    def skip_enabled(self) -> bool:
        """DeepSpeed tests ``os.getenv("DS_SKIP_CUDA_CHECK", "0") == "1"``: only ``1`` counts."""
        return self.skip_cuda_check == "1"


def installed_here() -> tuple[str | None, list[Path]]:
    """DeepSpeed's version and the folders holding its files in this interpreter (no import)."""
    try:
        dist = importlib.metadata.distribution("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None, []
    roots = [Path(str(dist.locate_file("")))]
    spec = importlib.util.find_spec("deepspeed")  # top-level: finds, does not execute
    if spec is not None and spec.submodule_search_locations:
        roots.extend(Path(location).parent for location in spec.submodule_search_locations)
    return dist.version, roots


def probe_deepspeed(env: Mapping[str, str], located: tuple[str | None, list[Path]] | None = None) -> DeepSpeedFacts:
    """DeepSpeed's version (package metadata), its CUDA rule and pre-built ops (its files). ``located``
    is where the job's interpreter found it (``--python``); by default this interpreter is asked."""
    skip = env.get("DS_SKIP_CUDA_CHECK")
    accelerator_env = env.get("DS_ACCELERATOR")
    version, roots = located if located is not None else installed_here()
    if version is None:
        return DeepSpeedFacts(version=None, skip_cuda_check=skip, accelerator_env=accelerator_env)
    rule, problem = _read_rule(roots)
    install = _read_install_info(roots)
    return DeepSpeedFacts(
        version=version,
        skip_cuda_check=skip,
        rule=rule,
        rule_problem=problem,
        prebuilt_ops=install.ops,
        prebuilt_cuda=install.cuda,
        prebuilt_torch=install.torch,
        prebuilt_accelerator=install.accelerator,
        accelerator_env=accelerator_env,
    )


def _read_rule(roots: list[Path]) -> tuple[DeepSpeedRule | None, str | None]:
    for root in roots:
        for relative in DS_BUILDER_FILES:
            path = root / relative
            if path.is_file():
                return parse_deepspeed_rule(path.read_text(errors="replace"), str(path))
    return None, "op_builder/builder.py not found in the installed DeepSpeed"


def parse_deepspeed_rule(source: str, origin: str) -> tuple[DeepSpeedRule | None, str | None]:
    """Read ``cuda_minor_mismatch_ok`` and the ``DS_SKIP_CUDA_CHECK`` escape from builder.py."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return None, f"{origin}: not parseable ({exc.msg})"
    if "def assert_no_cuda_mismatch" not in source:
        return None, f"{origin}: no assert_no_cuda_mismatch (unknown DeepSpeed layout)"
    table: dict[int, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "cuda_minor_mismatch_ok" for target in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
                table = {int(major): tuple(str(v) for v in versions) for major, versions in value.items()}
            except (ValueError, TypeError, AttributeError):
                return None, f"{origin}: cuda_minor_mismatch_ok is not a literal table"
    return DeepSpeedRule(table, "DS_SKIP_CUDA_CHECK" in source, origin, _checked_outside_builder(tree)), None


def _checked_outside_builder(tree: ast.AST) -> bool:
    """Does any function other than ``builder`` call ``assert_no_cuda_mismatch``?"""
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name == "builder":
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) \
                    == "assert_no_cuda_mismatch":
                return True
    return False


@dataclass(frozen=True, slots=True)
class InstallInfo:
    """What DeepSpeed's setup.py recorded in git_version_info_installed.py."""

    ops: tuple[str, ...] = ()
    cuda: str | None = None
    torch: str | None = None
    accelerator: str | None = None


def _recorded(value: object) -> str | None:
    return str(value) if value and str(value) != "0.0" else None


def _read_install_info(roots: list[Path]) -> InstallInfo:
    """Pre-built op names, the CUDA and torch they were compiled for, and the accelerator."""
    for root in roots:
        path = root / DS_INSTALL_INFO
        if not path.is_file():
            continue
        try:
            values = _literal_assignments(path.read_text(errors="replace"),
                                          ("installed_ops", "torch_info", "accelerator_name"))
        except SyntaxError:
            return InstallInfo()
        ops = values.get("installed_ops")
        built = tuple(sorted(name for name, flag in ops.items() if flag)) if isinstance(ops, dict) else ()
        info = values.get("torch_info")
        info = info if isinstance(info, dict) else {}
        accelerator = values.get("accelerator_name")
        return InstallInfo(built, _recorded(info.get("cuda_version")), _recorded(info.get("version")),
                           str(accelerator) if accelerator else None)
    return InstallInfo()


def _literal_assignments(source: str, names: tuple[str, ...]) -> dict[str, object]:
    """Top-level ``name = <literal>`` values; names whose value is not a literal are left out."""
    found: dict[str, object] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id in names:
                with contextlib.suppress(ValueError):
                    found[target.id] = ast.literal_eval(node.value)
    return found
