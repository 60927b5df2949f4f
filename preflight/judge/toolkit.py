"""Can a JIT build (DeepSpeed ops, torch C++/CUDA extensions) work with the toolkit on this node?

Plain DDP and FSDP need no toolkit (its findings are then a SKIP saying what was found, never a WARN
that would make a healthy node DEGRADED); DeepSpeed compiles its ops on first use with the toolkit at
``torch.utils.cpp_extension.CUDA_HOME`` and refuses a toolkit whose release does not match
``torch.version.cuda`` under its own rule (``op_builder/builder.py``, ``assert_no_cuda_mismatch``):
same ``major.minor`` passes; otherwise both releases must be listed in
``cuda_minor_mismatch_ok[toolkit_major]``; otherwise ``DS_SKIP_CUDA_CHECK=1`` lets it through with
a warning; otherwise it raises ``CUDAMismatchException``. The table is read from the installed
DeepSpeed when possible (it changed across releases: 0.15.0 lists 12.0-12.5; 0.19.8, the newest on
PyPI when this was written, lists 12.0-12.6, 12.8, 12.9 and nothing for 13.x, so a 13.x toolkit must
match torch exactly) and falls back to :data:`~preflight.judge.cuda_tables.DEEPSPEED_SNAPSHOT_TABLE`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from preflight.judge.cuda_tables import DEEPSPEED_SNAPSHOT_SOURCE, DEEPSPEED_SNAPSHOT_TABLE
from preflight.outcome import Metric, Verdict, error, fail, passed, skip, warn
from preflight.probe.jit_build import JitBuildResult
from preflight.probe.toolkit import NvccProbe, ToolkitFacts

ACCEPT_EQUAL = "equal"
ACCEPT_MINOR_TABLE = "minor-table"
REFUSED = "refused"


def deepspeed_expected(facts: ToolkitFacts, with_: tuple[str, ...] = ()) -> bool:
    """DeepSpeed counts when it is installed or the user said ``--with deepspeed``."""
    return facts.deepspeed.installed or "deepspeed" in {name.lower() for name in with_}


def deepspeed_table(facts: ToolkitFacts) -> tuple[Mapping[int, tuple[str, ...]], bool, str]:
    """``(table, honours DS_SKIP_CUDA_CHECK, where the rule came from)``."""
    rule = facts.deepspeed.rule
    if rule is not None:
        return rule.minor_mismatch_ok, rule.honours_skip_env, f"DeepSpeed {facts.deepspeed.version} ({rule.source})"
    return DEEPSPEED_SNAPSHOT_TABLE, True, DEEPSPEED_SNAPSHOT_SOURCE


def deepspeed_accepts(
    table: Mapping[int, tuple[str, ...]], toolkit: tuple[int, int], torch: tuple[int, int]
) -> str:
    """DeepSpeed's comparison, on ``major.minor`` strings exactly as it does it."""
    installed, compiled = f"{toolkit[0]}.{toolkit[1]}", f"{torch[0]}.{torch[1]}"
    if installed == compiled:
        return ACCEPT_EQUAL
    allowed = table.get(toolkit[0], ())
    if installed in allowed and compiled in allowed:
        return ACCEPT_MINOR_TABLE
    return REFUSED


def _root(probe: NvccProbe) -> str:
    return os.path.dirname(os.path.dirname(probe.path))


def _all_toolkits(facts: ToolkitFacts) -> list[NvccProbe]:
    probes = list(facts.nvcc_on_path) + list(facts.other_toolkits)
    if facts.cuda_home.nvcc:
        probes.insert(0, facts.cuda_home.nvcc)
    return [probe for probe in probes if probe.version]


def _install_hint(facts: ToolkitFacts, release: str, accept: tuple[int, int] | None = None) -> str:
    """Point at a toolkit already on disk that fits, else say which one to install."""
    table, _, _ = deepspeed_table(facts)
    for probe in _all_toolkits(facts):
        fits = probe.version and (
            probe.version.release_text == release
            or (accept and deepspeed_accepts(table, probe.version.release, accept) != REFUSED)
        )
        if fits and probe.root_has_headers:
            return f"export CUDA_HOME={_root(probe)}   # {probe.describe()}, already installed"
    dashed = release.replace(".", "-")
    return (
        f"Install the CUDA {release} toolkit (e.g. sudo apt-get install cuda-toolkit-{dashed} from NVIDIA's "
        f"repository, or conda install -c nvidia cuda-toolkit={release}), "
        f"then export CUDA_HOME=/usr/local/cuda-{release}"
    )


def judge_toolkit(facts: ToolkitFacts, with_: tuple[str, ...] = ()) -> Verdict:
    """Is there a toolkit a JIT build can use? Missing or unusable: FAIL when DeepSpeed is expected, else SKIP."""
    torch, home = facts.torch, facts.cuda_home
    found = "; ".join(probe.describe() for probe in facts.nvcc_on_path + facts.other_toolkits) or "no nvcc found"
    headers = "" if home.has_headers or not home.path else ", which has no include/cuda_runtime_api.h"
    resolved = (
        f"CUDA_HOME would resolve to {home.path} ({home.source}){headers}"
        if home.path
        else f"CUDA_HOME: {home.source}"
    )
    if not torch.is_cuda_build:
        return skip(
            f"{torch.describe()}: torch.utils.cpp_extension.CUDA_HOME is None, no JIT CUDA build will run; "
            f"toolkit on this node: {found}; {resolved}"
        )
    ds = deepspeed_expected(facts, with_)

    def verdict(code: str, summary: str, remediation: str, **extra: Any) -> Verdict:
        """A FAIL when DeepSpeed will JIT-build its ops; else a SKIP saying what was found (plain DDP/FSDP
        need no toolkit, so it must not make a healthy node DEGRADED)."""
        if ds:
            return fail(code, f"{summary} (DeepSpeed compiles its ops with it)", remediation, **extra)
        return skip(f"{summary} - not needed here: plain DDP/FSDP need no toolkit (--with deepspeed makes it count)",
                    **extra)

    evidence = {"nvcc --version": home.nvcc.output} if home.nvcc and home.nvcc.output else {}
    if home.path is None:
        return verdict(
            "CUDA_TOOLKIT_MISSING",
            f"no CUDA toolkit for torch's CUDA {torch.cuda}: {home.source}",
            _install_hint(facts, torch.cuda or "", torch.cuda_release),
        )
    if home.nvcc is None:
        return verdict(
            "CUDA_HOME_WITHOUT_NVCC",
            f"CUDA_HOME={home.path} ({home.source}) has no bin/nvcc; torch is built with CUDA {torch.cuda}",
            _install_hint(facts, torch.cuda or "", torch.cuda_release),
        )
    if home.nvcc.version is None:
        if "no answer within" in (home.nvcc.problem or ""):
            return error(f"{home.nvcc.path} --version did not answer: {home.nvcc.problem}", evidence=evidence)
        return verdict(
            "NVCC_UNUSABLE",
            f"{home.nvcc.path} does not report a CUDA release: {home.nvcc.problem}; "
            f"torch is built with CUDA {torch.cuda}",
            _install_hint(facts, torch.cuda or "", torch.cuda_release),
            evidence=evidence,
        )
    toolkit = home.nvcc.version
    need = torch.cuda_release
    no_headers = "" if home.has_headers else f"; {home.path}/include/cuda_runtime_api.h is missing too"
    if need and toolkit.release[0] != need[0]:
        return verdict(
            "TOOLKIT_MAJOR_MISMATCH",
            f"toolkit {toolkit.describe()} at {home.path} and torch's CUDA {torch.cuda} differ in major version; "
            f"torch.utils.cpp_extension refuses to build CUDA extensions{no_headers}",
            _install_hint(facts, torch.cuda or "", need),
            evidence=evidence,
        )
    if not home.has_headers:
        return verdict(
            "CUDA_HOME_WITHOUT_HEADERS",
            f"CUDA_HOME={home.path} ({home.source}) has {toolkit.describe()} but no include/cuda_runtime_api.h; "
            f"JIT builds against torch's CUDA {torch.cuda} will not find the CUDA headers",
            _install_hint(facts, toolkit.release_text, need),
            evidence=evidence,
        )
    return passed(
        f"toolkit {toolkit.describe()} at {home.path} ({home.source}); torch built with CUDA {torch.cuda}",
        evidence=evidence,
    )


def judge_cuda_home_vs_path(facts: ToolkitFacts) -> Verdict:
    """CUDA_HOME (what builds use) and the first nvcc on PATH (what a shell runs) should agree."""
    home, first = facts.cuda_home, facts.first_nvcc
    if home.path is None and first is None:
        return skip(f"no CUDA_HOME and no nvcc on PATH ({home.source})")
    if first is None:
        return passed(f"no nvcc on PATH; CUDA_HOME={home.path} ({home.source}) is the only toolkit in use")
    if home.nvcc is None:
        return warn(
            "CUDA_HOME_PATH_DISAGREE",
            f"CUDA_HOME={home.path} ({home.source}) has no bin/nvcc while PATH has {first.describe()}",
            f"export CUDA_HOME={_root(first)}",
        )
    if home.nvcc.resolved == first.resolved:
        return passed(f"CUDA_HOME resolves to {home.path} ({home.source}); PATH and builds both use {first.describe()}")
    home_release = home.nvcc.version.release if home.nvcc.version else None
    path_release = first.version.release if first.version else None
    if home_release is not None and home_release == path_release:
        return passed(f"CUDA_HOME={home.path} and PATH's {first.path} are both "
                      f"CUDA {home_release[0]}.{home_release[1]}")
    return warn(
        "CUDA_HOME_PATH_DISAGREE",
        f"CUDA_HOME={home.path} ({home.source}) has {home.nvcc.describe()} "
        f"but the first nvcc on PATH is {first.describe()}",
        f"export PATH={home.path}/bin:$PATH   # or export CUDA_HOME={_root(first)}; "
        "builds use CUDA_HOME, shells use PATH",
    )


def judge_deepspeed_cuda(facts: ToolkitFacts, with_: tuple[str, ...] = ()) -> Verdict:
    """Would DeepSpeed's op builder accept the toolkit for torch's CUDA? FAIL when it would refuse."""
    ds, torch, home = facts.deepspeed, facts.torch, facts.cuda_home
    if not deepspeed_expected(facts, with_):
        return skip("DeepSpeed is not installed and not announced (--with deepspeed)")
    if not torch.is_cuda_build or torch.cuda_release is None:
        return skip(f"{torch.describe()}: DeepSpeed builds CPU ops only, its CUDA check does not run")
    if ds.prebuilt_ops and ds.prebuilt_cuda and ds.prebuilt_cuda != f"{torch.cuda_release[0]}.{torch.cuda_release[1]}":
        return fail(
            "DEEPSPEED_PREBUILT_CUDA_MISMATCH",
            f"DeepSpeed {ds.version}'s pre-built ops ({', '.join(ds.prebuilt_ops)}) were compiled for CUDA "
            f"{ds.prebuilt_cuda} but {torch.describe()}; DeepSpeed refuses to load them",
            f"pip install --force-reinstall --no-cache-dir deepspeed=={ds.version}   "
            f"# rebuilds against CUDA {torch.cuda}",
        )
    if home.nvcc is None or home.nvcc.version is None:
        return skip(f"no usable toolkit at CUDA_HOME ({home.source}): see the CUDA toolkit check")
    table, honours_skip, origin = deepspeed_table(facts)
    toolkit = home.nvcc.version
    who = f"DeepSpeed {ds.version}" if ds.installed else "DeepSpeed (not installed yet)"
    listed = ", ".join(table.get(toolkit.release[0], ())) or "none"
    evidence = {"rule": f"{origin}; minor table for {toolkit.release[0]}.x: {listed}"}
    if ds.rule_problem:
        evidence["rule note"] = ds.rule_problem
    pair = f"toolkit {toolkit.describe()} at {home.path} vs torch's CUDA {torch.cuda}"
    if ds.prebuilt_ops:
        evidence["pre-built ops (not JIT-built)"] = ", ".join(ds.prebuilt_ops)
    verdict = deepspeed_accepts(table, toolkit.release, torch.cuda_release)
    if verdict == ACCEPT_EQUAL:
        return passed(f"{who} accepts {pair} (same release)", evidence=evidence)
    if verdict == ACCEPT_MINOR_TABLE:
        return passed(f"{who} accepts {pair} (both in its minor-version table)", evidence=evidence)
    fix = _install_hint(facts, torch.cuda or "", torch.cuda_release)
    if ds.skip_enabled and honours_skip:
        return warn(
            "DEEPSPEED_CUDA_CHECK_SKIPPED",
            f"{who} would refuse {pair}; DS_SKIP_CUDA_CHECK=1 lets the build through unchecked",
            f"{fix}   # then unset DS_SKIP_CUDA_CHECK",
            evidence=evidence,
        )
    ignored = " (DS_SKIP_CUDA_CHECK=1 is set but this DeepSpeed ignores it)" if ds.skip_enabled else ""
    return fail(
        "DEEPSPEED_CUDA_MISMATCH",
        f"{who} will refuse to build its ops: {pair}{ignored}",
        f"{fix}   # or, at your own risk: export DS_SKIP_CUDA_CHECK=1",
        evidence=evidence,
    )


def judge_build_tools(facts: ToolkitFacts, with_: tuple[str, ...] = ()) -> Verdict:
    """ninja and a C++ compiler: FAIL when missing while DeepSpeed is expected."""
    ninja, cxx = facts.ninja, facts.compiler
    found = f"ninja {ninja.version} ({ninja.path}), {cxx.version} ({cxx.path}, {cxx.source})"
    missing = [tool for tool in (ninja, cxx) if not tool.found]
    if not missing:
        return passed(found)
    problems = "; ".join(tool.problem or tool.name for tool in missing)
    fixes = []
    if not ninja.found:
        fixes.append("pip install ninja")
    if not cxx.found:
        fixes.append(
            f"export CXX={cxx.alternatives[0]}" if cxx.alternatives else "sudo apt-get install -y build-essential"
        )
    if deepspeed_expected(facts, with_):
        who = f"DeepSpeed {facts.deepspeed.version}" if facts.deepspeed.installed else "DeepSpeed"
        return fail("BUILD_TOOLS_MISSING", f"{who} JIT-builds its ops but {problems}", " && ".join(fixes))
    if not cxx.found:
        return warn(
            "CXX_COMPILER_MISSING", f"{problems}: torch.compile and C++/CUDA extensions need one", " && ".join(fixes)
        )
    return passed(f"{problems} (only JIT extensions such as DeepSpeed ops need ninja); {cxx.version}")


def jit_build_skip_reason(facts: ToolkitFacts) -> str | None:
    """Why the slow JIT-build check does not apply here, or None when it should run."""
    if not facts.deepspeed.installed:
        return "DeepSpeed is not installed: no op to JIT-build (pip install deepspeed first)"
    if not facts.torch.is_cuda_build:
        return f"{facts.torch.describe()}: DeepSpeed's CUDA ops cannot be built"
    return None


def judge_jit_build(facts: ToolkitFacts, result: JitBuildResult) -> Verdict:
    """The build log decides: PASS with the time it took, FAIL with the compiler's words."""
    toolkit = facts.cuda_home.nvcc.describe() if facts.cuda_home.nvcc else "no nvcc at CUDA_HOME"
    who = f"DeepSpeed {facts.deepspeed.version} {result.op}"
    evidence = {"build log (tail)": result.tail()}
    metrics = (Metric("jit_build_seconds", round(result.duration_s, 1), "s"),)
    if result.ok:
        return passed(
            f"{who} JIT-built in {result.duration_s:.0f} s with {toolkit}", metrics=metrics, evidence=evidence
        )
    if result.timed_out:
        return error(
            f"{who} JIT build did not finish within {result.duration_s:.0f} s ({toolkit})",
            code="JIT_BUILD_TIMEOUT", evidence=evidence, metrics=metrics,
        )
    errors = [line for line in result.error_lines if "error" in line.lower()] or list(result.error_lines)
    first = errors[0] if errors else f"exit code {result.returncode}, no error line found"
    evidence["compiler errors"] = "\n".join(result.error_lines) or result.tail(20)
    return fail(
        "DEEPSPEED_JIT_BUILD_FAILED",
        f"{who} JIT build failed ({toolkit}, torch CUDA {facts.torch.cuda}): {first[:300]}",
        "Reproduce and read the first error: TORCH_EXTENSIONS_DIR=$(mktemp -d) python -c "
        f"'from deepspeed.ops.op_builder import {result.op}; {result.op}().jit_load(verbose=True)'",
        evidence=evidence,
        metrics=metrics,
    )
