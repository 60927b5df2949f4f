"""Can a JIT build (DeepSpeed ops, torch C++/CUDA extensions) work with the toolkit on this node?

Each rule is applied only on the path that applies it, as read in the sources (line numbers of
torch 2.4.1 / 2.13.0 / 2.14.1 ``torch/utils/cpp_extension.py`` and the DeepSpeed 0.19.8 sdist):

- torch: ``_check_cuda_version`` (lines 392 / 622 / 627) compares the ``nvcc`` release with
  ``torch.version.cuda``, raises on a major mismatch ("The detected CUDA version (%s) mismatches
  the version that was used to compile PyTorch") and warns on a minor one; its only caller is
  ``BuildExtension.build_extensions`` (lines 518 / 817 / 822), an ahead-of-time ``setup.py`` build.
  The JIT path (``load`` -> ``_jit_compile``, lines 1662 / 2302 / 2312) compares nothing: torch
  2.4.1+cu121 JIT-built and loaded a ``.cu`` extension with nvcc 13.0 here, which then carries a
  second CUDA runtime into the process.
- DeepSpeed (``op_builder/builder.py``): ``assert_no_cuda_mismatch`` (line 107: same
  ``major.minor``; else both in ``cuda_minor_mismatch_ok[toolkit major]``; else
  ``DS_SKIP_CUDA_CHECK=1`` lets it pass with a warning; else ``CUDAMismatchException``) is called
  only from ``CUDAOpBuilder.builder()`` (line 804), which ``setup.py`` calls (line 177) for ops
  pre-built at install (``DS_BUILD_OPS=1`` / ``DS_BUILD_<OP>=1``); ``jit_load`` (line 568), the
  default path that compiles an op at the job's first use, never calls it (it sets
  ``build_for_cpu = not torch.cuda.is_available()``, line 580). The install notes ask for the
  toolkit's major to match torch's. ``load()`` (line 549) imports a pre-built op instead when
  ``installed_ops[name]`` is set and the install's ``accelerator_name`` is the running one, after
  ``validate_torch_version`` (line 170: "PyTorch version mismatch!" when torch's ``major.minor``
  differs from the install's) and, for CUDA ops with CUDA available, ``validate_torch_op_version``
  (line 181). With ops pre-built nothing is compiled: no nvcc, no ninja. Older releases also
  called the check outside ``builder()`` (``is_cuda_enable``); the probe reads which
  (:attr:`~preflight.probe.deepspeed.DeepSpeedRule.checked_in_jit`).
- The accelerator (``accelerator/real_accelerator.py: get_accelerator``): ``DS_ACCELERATOR`` when
  set, else CUDA when torch sees a device, else the CPU accelerator, whose ops are C++ only.

The ``cuda_minor_mismatch_ok`` table is read from the installed DeepSpeed when possible (0.15.0
lists 12.0-12.5; 0.19.8 lists 12.0-12.6, 12.8, 12.9 and nothing for 13.x, so an ahead-of-time build
with a 13.x toolkit needs torch's exact release) and falls back to
:data:`~preflight.judge.cuda_tables.DEEPSPEED_SNAPSHOT_TABLE`.

A toolkit matters only to a job that builds: DeepSpeed installed or ``--with deepspeed``, or
``--with cpp-extensions``. Elsewhere (plain DDP/FSDP) its findings are reported as a SKIP that says
what was found, never as a WARN that would make a healthy node DEGRADED.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

from preflight.judge.cuda_tables import DEEPSPEED_SNAPSHOT_SOURCE, DEEPSPEED_SNAPSHOT_TABLE
from preflight.outcome import Metric, Verdict, error, fail, passed, skip, warn
from preflight.parse.op_build import find_op_build_failure
from preflight.probe.deepspeed_ops import OpBuild
from preflight.probe.toolkit import NvccProbe, ToolkitFacts

ACCEPT_EQUAL = "equal"
ACCEPT_MINOR_TABLE = "minor-table"
REFUSED = "refused"
CPP_EXTENSIONS = "cpp-extensions"
ZERO_OPS = ("fused_adam",)
"""The ops a ZeRO job's optimizer loads on GPUs (runtime/engine.py: FusedAdam for Adam/AdamW)."""
SUPPORTED_ACCELERATORS = ("cuda", "cpu", "xpu", "npu", "mps", "hpu", "mlu", "sdaa", "supa", "klxpu")
"""DeepSpeed 0.19.8 ``accelerator/real_accelerator.py`` SUPPORTED_ACCELERATOR_LIST."""


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
        f"repository, or conda install -c nvidia cuda-toolkit={release}), then "
        f"export CUDA_HOME=/usr/local/cuda-{release}"
    )


def cpp_extensions_expected(with_: tuple[str, ...] = ()) -> bool:
    """``--with cpp-extensions``: the job JIT-builds torch C++/CUDA extensions itself."""
    return CPP_EXTENSIONS in {name.lower() for name in with_}


def prebuilt_applies(facts: ToolkitFacts, accelerator: str = "cuda") -> bool:
    """DeepSpeed's ``load()`` imports its pre-built ops only on the accelerator they were built for."""
    ds = facts.deepspeed
    return bool(ds.prebuilt_ops) and ds.prebuilt_accelerator in (None, accelerator)


def deepspeed_accelerator(facts: ToolkitFacts, gpus: int | None = None) -> str:
    """The accelerator DeepSpeed picks here (``accelerator/real_accelerator.py: get_accelerator``):
    ``DS_ACCELERATOR`` when set, else ``cuda`` when torch sees a CUDA device, else ``cpu``. ``gpus``
    None (not known) counts a CUDA build of torch as having its GPUs."""
    if facts.deepspeed.accelerator_env:
        return facts.deepspeed.accelerator_env
    has_gpus = gpus is None or gpus > 0
    return "cuda" if facts.torch.is_cuda_build and has_gpus else "cpu"


def _toolkit_need(facts: ToolkitFacts, with_: tuple[str, ...], gpus: int | None) -> tuple[bool, str]:
    """``(required, why)``: does anything the job does compile with the toolkit?"""
    if cpp_extensions_expected(with_):
        return True, "the job JIT-builds torch C++/CUDA extensions (--with cpp-extensions)"
    if deepspeed_expected(facts, with_):
        ds = facts.deepspeed
        who = f"DeepSpeed {ds.version}" if ds.installed else "DeepSpeed (--with deepspeed)"
        accelerator = deepspeed_accelerator(facts, gpus)
        if accelerator != "cuda":
            return False, (f"{who} uses its {accelerator} accelerator here ({_why_accelerator(facts, gpus)}) and "
                           "builds C++ ops only, without nvcc")
        if prebuilt_applies(facts) and all(op in ds.prebuilt_ops for op in ZERO_OPS):
            return False, (f"{who} has its ops pre-built ({', '.join(ds.prebuilt_ops)}): nothing is compiled unless "
                           "the job uses an op outside that list")
        return True, f"{who} JIT-builds its ops with it at the job's first step"
    return False, ("no JIT build expected: plain DDP/FSDP need no toolkit (DeepSpeed is not installed; "
                   "--with deepspeed or --with cpp-extensions make it a requirement)")


def _why_accelerator(facts: ToolkitFacts, gpus: int | None) -> str:
    if facts.deepspeed.accelerator_env:
        return f"DS_ACCELERATOR={facts.deepspeed.accelerator_env}"
    return "no CUDA device visible" if facts.torch.is_cuda_build else "CPU build of torch"


def judge_toolkit(facts: ToolkitFacts, with_: tuple[str, ...] = (), gpus: int | None = None) -> Verdict:
    """Is there a toolkit a JIT build can use? Judged only when the job builds (else SKIP with the facts):
    missing or unusable is a FAIL, a major-version mismatch a WARN (two CUDA runtimes in one process)."""
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
    required, why = _toolkit_need(facts, with_, gpus)
    evidence = {"nvcc --version": home.nvcc.output} if home.nvcc and home.nvcc.output else {}
    hint = _install_hint(facts, torch.cuda or "", torch.cuda_release)

    def problem(code: str, summary: str, *, serious: bool = True) -> Verdict:
        if not required:
            return skip(f"{summary} - not needed here: {why}")
        if serious:
            return fail(code, f"{summary} ({why})", hint, evidence=evidence)
        return warn(code, f"{summary} ({why})", hint, evidence=evidence)

    if home.path is None:
        return problem("CUDA_TOOLKIT_MISSING", f"no CUDA toolkit for torch's CUDA {torch.cuda}: {home.source}")
    if home.nvcc is None:
        return problem("CUDA_HOME_WITHOUT_NVCC", f"CUDA_HOME={home.path} ({home.source}) has no bin/nvcc; torch is "
                       f"built with CUDA {torch.cuda}")
    if home.nvcc.version is None:
        if "no answer within" in (home.nvcc.problem or ""):
            return error(f"{home.nvcc.path} --version did not answer: {home.nvcc.problem}", evidence=evidence)
        return problem("NVCC_UNUSABLE", f"{home.nvcc.path} does not report a CUDA release: {home.nvcc.problem}; "
                       f"torch is built with CUDA {torch.cuda}")
    toolkit = home.nvcc.version
    need = torch.cuda_release
    no_headers = "" if home.has_headers else f"; {home.path}/include/cuda_runtime_api.h is missing too"
    if need and toolkit.release[0] != need[0]:
        return problem(
            "TOOLKIT_MAJOR_MISMATCH",
            f"toolkit {toolkit.describe()} at {home.path} and torch's CUDA {torch.cuda} differ in major version: a "
            f"JIT build (torch.utils.cpp_extension.load) compiles and loads, but the extension brings the CUDA "
            f"{toolkit.release[0]} runtime into a process running torch's CUDA {need[0]} (two CUDA runtimes in one "
            f"process: undefined behaviour, crashes at the first kernel are common); an ahead-of-time setup.py "
            f"build (BuildExtension) refuses it{no_headers}",
            serious=False,
        )
    if not home.has_headers:
        return problem(
            "CUDA_HOME_WITHOUT_HEADERS",
            f"CUDA_HOME={home.path} ({home.source}) has {toolkit.describe()} but no include/cuda_runtime_api.h; "
            f"JIT builds against torch's CUDA {torch.cuda} will not find the CUDA headers",
        )
    minor = "" if need is None or toolkit.release == need else " (minor versions differ: builds accept it)"
    summary = f"toolkit {toolkit.describe()} at {home.path} ({home.source}); torch built with CUDA {torch.cuda}{minor}"
    return passed(summary if required else f"{summary}; {why}", evidence=evidence)


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
        return passed(f"CUDA_HOME={home.path} and PATH's {first.path} are both CUDA "
                      f"{home_release[0]}.{home_release[1]}")
    return warn(
        "CUDA_HOME_PATH_DISAGREE",
        f"CUDA_HOME={home.path} ({home.source}) has {home.nvcc.describe()} "
        f"but the first nvcc on PATH is {first.describe()}",
        f"export PATH={home.path}/bin:$PATH   # or export CUDA_HOME={_root(first)}; builds use CUDA_HOME, "
        "shells use PATH",
    )


def _major_minor(version: str | None) -> str | None:
    """``"2.13.0+cpu"`` -> ``"2.13"`` (DeepSpeed compares ``".".join(torch.__version__.split('.')[:2])``)."""
    if not version:
        return None
    try:
        release = Version(version).release
    except InvalidVersion:
        return ".".join(version.split(".")[:2])
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def judge_deepspeed_prebuilt(facts: ToolkitFacts, accelerator: str) -> Verdict | None:
    """FAIL when DeepSpeed would refuse to load its pre-built ops (``OpBuilder.load``), else None."""
    ds, torch = facts.deepspeed, facts.torch
    if not prebuilt_applies(facts, accelerator):
        return None
    ops = ", ".join(ds.prebuilt_ops)
    reinstall = (f"pip install --force-reinstall --no-cache-dir --no-build-isolation deepspeed=={ds.version}   "
                 f"# with DS_BUILD_OPS=1 to pre-build against this torch again")
    runtime = _major_minor(torch.version)
    if ds.prebuilt_torch and runtime and ds.prebuilt_torch != runtime:
        return fail(
            "DEEPSPEED_PREBUILT_TORCH_MISMATCH",
            f"DeepSpeed {ds.version}'s pre-built ops ({ops}) were compiled against torch {ds.prebuilt_torch} but this "
            f"is torch {torch.version}: loading them raises \"PyTorch version mismatch! DeepSpeed ops were compiled "
            f"and installed with a different version than what is being used at runtime\" at the job's first step",
            reinstall,
        )
    if (accelerator == "cuda" and torch.cuda_release and ds.prebuilt_cuda
            and ds.prebuilt_cuda != f"{torch.cuda_release[0]}.{torch.cuda_release[1]}"):
        return fail(
            "DEEPSPEED_PREBUILT_CUDA_MISMATCH",
            f"DeepSpeed {ds.version}'s pre-built ops ({ops}) were compiled for CUDA {ds.prebuilt_cuda} but "
            f"{torch.describe()}: loading them raises \"CUDA version mismatch! DeepSpeed ops were compiled and "
            f"installed with a different version\"",
            reinstall,
        )
    return None


def judge_deepspeed_cuda(facts: ToolkitFacts, with_: tuple[str, ...] = (), gpus: int | None = None) -> Verdict:
    """Does the toolkit fit DeepSpeed on the path it will take? A major mismatch is a FAIL; a minor one
    only bites an ahead-of-time build (WARN); pre-built ops that will not load are a FAIL."""
    ds, torch, home = facts.deepspeed, facts.torch, facts.cuda_home
    if not deepspeed_expected(facts, with_):
        return skip("DeepSpeed is not installed and not announced (--with deepspeed)")
    accelerator = deepspeed_accelerator(facts, gpus)
    prebuilt = judge_deepspeed_prebuilt(facts, accelerator)
    if prebuilt is not None:
        return prebuilt
    if not torch.is_cuda_build or torch.cuda_release is None:
        return skip(f"{torch.describe()}: DeepSpeed builds CPU ops only (C++), its CUDA checks do not run")
    if accelerator != "cuda":
        return skip(f"DeepSpeed uses its {accelerator} accelerator here ({_why_accelerator(facts, gpus)}): it builds "
                    "C++ ops only, its CUDA checks do not run (see the DeepSpeed accelerator check)")
    if home.nvcc is None or home.nvcc.version is None:
        if prebuilt_applies(facts) and all(op in ds.prebuilt_ops for op in ZERO_OPS):
            return passed(f"DeepSpeed {ds.version} loads its pre-built ops ({', '.join(ds.prebuilt_ops)}) "
                          f"compiled for torch {ds.prebuilt_torch or '?'} with CUDA {ds.prebuilt_cuda or '?'}: "
                          "no toolkit needed")
        return skip(f"no usable toolkit at CUDA_HOME ({home.source}): see the CUDA toolkit check")
    table, honours_skip, origin = deepspeed_table(facts)
    toolkit = home.nvcc.version
    who = f"DeepSpeed {ds.version}" if ds.installed else "DeepSpeed (not installed yet)"
    listed = ", ".join(table.get(toolkit.release[0], ())) or "none"
    evidence = {"rule": f"{origin}; minor table for {toolkit.release[0]}.x: {listed}"}
    if ds.rule_problem:
        evidence["rule note"] = ds.rule_problem
    if ds.prebuilt_ops:
        evidence["pre-built ops (not JIT-built)"] = ", ".join(ds.prebuilt_ops)
    pair = f"toolkit {toolkit.describe()} at {home.path} vs torch's CUDA {torch.cuda}"
    fix = _install_hint(facts, torch.cuda or "", torch.cuda_release)
    skip_set = ds.skip_enabled and honours_skip
    if toolkit.release[0] != torch.cuda_release[0]:
        ignored = (" DS_SKIP_CUDA_CHECK=1 does not change this: it only lets an ahead-of-time build past DeepSpeed's "
                   "version check." if ds.skip_enabled else "")
        return fail(
            "DEEPSPEED_CUDA_MAJOR_MISMATCH",
            f"{who} would compile its ops with {pair}: the JIT build at the first step links the CUDA "
            f"{toolkit.release[0]} runtime into a process running torch's CUDA {torch.cuda_release[0]}; DeepSpeed's "
            f"install notes require the majors to match, and an ahead-of-time build (DS_BUILD_OPS=1) is refused "
            f"outright (CUDAMismatchException, and torch's BuildExtension).{ignored}",
            fix,
            evidence=evidence,
        )
    verdict = deepspeed_accepts(table, toolkit.release, torch.cuda_release)
    if verdict == ACCEPT_EQUAL:
        return passed(f"{who} accepts {pair} (same release)", evidence=evidence)
    if verdict == ACCEPT_MINOR_TABLE:
        return passed(f"{who} accepts {pair}: JIT builds do not compare versions and an ahead-of-time build finds "
                      f"both in its minor-version table", evidence=evidence)
    if ds.rule is not None and ds.rule.checked_in_jit:
        if skip_set:
            return warn("DEEPSPEED_CUDA_CHECK_SKIPPED",
                        f"{who} would refuse {pair}; DS_SKIP_CUDA_CHECK=1 lets the build through unchecked",
                        f"{fix}   # then unset DS_SKIP_CUDA_CHECK", evidence=evidence)
        ignored = " (DS_SKIP_CUDA_CHECK=1 is set but this DeepSpeed ignores it)" if ds.skip_enabled else ""
        escape = "   # or, at your own risk: export DS_SKIP_CUDA_CHECK=1" if honours_skip else ""
        return fail("DEEPSPEED_CUDA_MISMATCH",
                    f"{who} will refuse to build its ops: {pair}; this release compares versions when it JIT-builds "
                    f"too (assert_no_cuda_mismatch outside builder()){ignored}", f"{fix}{escape}", evidence=evidence)
    if skip_set:
        return passed(f"{who}: {pair} differ in minor version only; JIT builds do not compare versions, and "
                      "DS_SKIP_CUDA_CHECK=1 (set) lets an ahead-of-time build through with a warning",
                      evidence=evidence)
    return warn(
        "DEEPSPEED_CUDA_MINOR_MISMATCH",
        f"{pair} differ in minor version only: {who}'s JIT builds (the default: ops compiled at the job's first step) "
        f"accept it; it bites only an ahead-of-time build (DS_BUILD_OPS=1 or DS_BUILD_<OP>=1 pip install deepspeed), "
        f"where assert_no_cuda_mismatch raises CUDAMismatchException ({toolkit.release[0]}.x lists {listed} as "
        f"interchangeable)",
        f"Nothing to do for JIT builds. For an ahead-of-time build: {fix}, or build with DS_SKIP_CUDA_CHECK=1 "
        f"DS_BUILD_OPS=1 pip install --no-build-isolation deepspeed (the variable affects only that build)",
        evidence=evidence,
    )


def judge_deepspeed_accelerator(facts: ToolkitFacts, gpus: int | None, with_: tuple[str, ...] = ()) -> Verdict:
    """``DS_ACCELERATOR`` overrides DeepSpeed's detection (``accelerator/real_accelerator.py``): ``cpu`` on a
    GPU node trains on the CPU; ``cuda`` without GPUs, or an unknown name, breaks at ``import deepspeed``."""
    value = facts.deepspeed.accelerator_env
    if not deepspeed_expected(facts, with_):
        return skip("DeepSpeed is not installed and not announced (--with deepspeed)")
    detected = deepspeed_accelerator(dataclasses.replace(facts, deepspeed=dataclasses.replace(
        facts.deepspeed, accelerator_env=None)), gpus)
    if value is None:
        return passed(f"DS_ACCELERATOR is not set: DeepSpeed detects its accelerator ({detected} on this node)")
    fix = "unset DS_ACCELERATOR   # let DeepSpeed detect the GPUs"
    if value not in SUPPORTED_ACCELERATORS:
        return fail("DEEPSPEED_ACCELERATOR_UNKNOWN", f"DS_ACCELERATOR={value!r} is not one DeepSpeed knows "
                    f"({', '.join(SUPPORTED_ACCELERATORS)}): get_accelerator() raises ValueError at the job's start",
                    fix)
    if value == "cpu" and detected == "cuda":
        return warn("DEEPSPEED_ACCELERATOR_CPU",
                    f"DS_ACCELERATOR=cpu is set on a node with {gpus if gpus is not None else 'its'} GPU(s): DeepSpeed "
                    "uses its CPU_Accelerator (CPU tensors, gloo or oneCCL, C++ ops), so a DeepSpeed job trains on the "
                    "CPU and leaves the GPUs idle",
                    fix)
    if value == "cuda" and detected != "cuda":
        return warn("DEEPSPEED_ACCELERATOR_CUDA_WITHOUT_GPU",
                    f"DS_ACCELERATOR=cuda is set but {'no GPU is visible' if gpus == 0 else facts.torch.describe()}: "
                    "DeepSpeed's CUDA_Accelerator fails at its first device call",
                    "unset DS_ACCELERATOR   # DeepSpeed then picks its CPU accelerator here")
    if value != detected:
        return warn("DEEPSPEED_ACCELERATOR_OVERRIDDEN", f"DS_ACCELERATOR={value} overrides DeepSpeed's detection "
                    f"({detected} here)", fix)
    return passed(f"DS_ACCELERATOR={value}, what DeepSpeed would detect here anyway")


def judge_build_tools(facts: ToolkitFacts, with_: tuple[str, ...] = (), gpus: int | None = None) -> Verdict:
    """ninja and a C++ compiler: FAIL when missing while something will JIT-build (DeepSpeed without
    pre-built ops for this accelerator, or --with cpp-extensions)."""
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
        fixes.append(f"export CXX={cxx.alternatives[0]}" if cxx.alternatives
                     else "sudo apt-get install -y build-essential")
    accelerator = deepspeed_accelerator(facts, gpus)
    ds = facts.deepspeed
    all_prebuilt = prebuilt_applies(facts, accelerator) and all(op in ds.prebuilt_ops for op in ZERO_OPS)
    if deepspeed_expected(facts, with_) and not cpp_extensions_expected(with_) and all_prebuilt:
        return passed(f"{problems}: DeepSpeed {ds.version} loads its pre-built ops ({', '.join(ds.prebuilt_ops)}) "
                      "without ninja or a compiler")
    if deepspeed_expected(facts, with_) or cpp_extensions_expected(with_):
        who = (f"DeepSpeed {ds.version}" if ds.installed else "DeepSpeed") if deepspeed_expected(facts, with_) \
            else "the job (--with cpp-extensions)"
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
    return None


def judge_jit_build(facts: ToolkitFacts, build: OpBuild) -> Verdict:
    """The build says what was really built (which accelerator's builder, with which compilers):
    PASS with the time it took, FAIL with the compiler's words."""
    op = build.ops[0] if build.ops else None
    who = f"DeepSpeed {facts.deepspeed.version}"
    evidence = {"build log (tail)": build.tail()}
    metrics = (Metric("jit_build_seconds", round(op.seconds if op else build.duration_s, 1), "s"),)
    if build.ok and op is not None:
        if op.device == "cuda":
            toolkit = facts.cuda_home.nvcc.describe() if facts.cuda_home.nvcc else "nvcc at CUDA_HOME"
            how = f"its CUDA {op.name} with {toolkit} and {op.compilers[0]}"
        else:
            why = (" (no CUDA device visible); nvcc was not used, so this does not prove the CUDA toolkit"
                   if facts.torch.is_cuda_build else "")
            how = f"its CPU {op.name} with {', '.join(op.compilers)} only: the {build.accelerator} accelerator{why}"
        return passed(f"{who} JIT-built {how}, from scratch in {op.seconds:.0f} s ({op.builder_class})",
                      metrics=metrics, evidence=evidence)
    what = f"{who} {op.name if op else 'FusedAdamBuilder'}"
    if build.timed_out:
        return error(
            f"{what} JIT build did not finish within {build.duration_s:.0f} s (--jit-build-timeout)",
            code="JIT_BUILD_TIMEOUT", evidence=evidence, metrics=metrics,
        )
    failure = find_op_build_failure(f"{build.output}\n{op.error if op else ''}")
    first = failure.message if failure else (op.error if op and op.error else
                                             f"exit code {build.returncode}, no error line found")
    return fail(
        "DEEPSPEED_JIT_BUILD_FAILED",
        f"{what} JIT build failed (torch CUDA {facts.torch.cuda or 'none'}, {build.accelerator or '?'} accelerator): "
        f"{first[:300]}",
        "Reproduce and read the first error: TORCH_EXTENSIONS_DIR=$(mktemp -d) python -c "
        "'from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().jit_load(verbose=True)'",
        evidence=evidence,
        metrics=metrics,
    )
