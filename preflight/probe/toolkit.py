"""Facts about the CUDA build of torch and the toolkit a JIT extension build would use.

Nothing here initialises CUDA: torch's CUDA version, architecture list and NCCL version are
compile-time constants, the toolkit is found on disk and asked through ``nvcc --version`` with a
deadline, and DeepSpeed is read from its installed files (never imported, since importing it
picks an accelerator and may touch CUDA). Driver facts come from NVML (``preflight.probe.nvml``).

How ``CUDA_HOME`` is resolved mirrors ``torch.utils.cpp_extension._find_cuda_home`` as read in
torch 2.13.0 (installed here) and in the copies found in the public code index: env ``CUDA_HOME``,
else ``CUDA_PATH`` (``or``: an empty value falls through), else the folder above the folder of
the first ``nvcc`` on PATH, else ``/usr/local/cuda`` if it exists. torch only computes it when it
is a CUDA build (``CUDA_HOME = _find_cuda_home() if (torch.cuda._is_compiled() and
torch.version.cuda) else None`` in 2.13; ``if torch.cuda._is_compiled()`` in older releases), so
on a CPU build ``cpp_extension.CUDA_HOME`` is None whatever is installed.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from preflight.parse.nvcc import NvccParseError, NvccVersion, parse_nvcc_version
from preflight.probe.command import CommandRunner
from preflight.probe.job_torch import JobTorch
from preflight.probe.deepspeed import DeepSpeedFacts, probe_deepspeed

NVCC_TIMEOUT_S = 15.0
TOOL_TIMEOUT_S = 10.0
TOOLKIT_GLOB = "usr/local/cuda*"
"""Where toolkits are installed, under the node's filesystem root (``Transports.root``)."""
DEFAULT_CUDA_HOME = "usr/local/cuda"
"""torch's last resort for ``CUDA_HOME``, under the node's filesystem root."""


@dataclass(frozen=True, slots=True)
class NvccProbe:
    """One ``nvcc`` executable and what its ``--version`` said."""

    path: str
    resolved: str
    version: NvccVersion | None
    output: str
    problem: str | None = None
    root_has_headers: bool = False
    """``<path>/../../include/cuda_runtime_api.h`` exists: the folder can serve as CUDA_HOME."""

    def describe(self) -> str:
        """``CUDA 12.4 (V12.4.131) at /usr/local/cuda-12.4/bin/nvcc``."""
        what = self.version.describe() if self.version else f"unreadable nvcc ({self.problem})"
        return f"{what} at {self.path}"


@dataclass(frozen=True, slots=True)
class CudaHome:
    """The toolkit root ``torch.utils.cpp_extension`` would pick, and how it was found."""

    path: str | None
    source: str
    nvcc: NvccProbe | None
    has_headers: bool

    @property
    def nvcc_path(self) -> str | None:
        """``$CUDA_HOME/bin/nvcc``: what DeepSpeed runs to read the toolkit version."""
        return os.path.join(self.path, "bin", "nvcc") if self.path else None


@dataclass(frozen=True, slots=True)
class ToolProbe:
    """A build tool (ninja, the C++ compiler): where it is and its first version line."""

    name: str
    command: tuple[str, ...]
    path: str | None
    version: str | None
    source: str
    problem: str | None = None
    alternatives: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        """True when the tool ran and answered ``--version``."""
        return self.path is not None and self.problem is None


@dataclass(frozen=True, slots=True)
class ToolkitFacts:
    """Everything the toolkit judges need, gathered once."""

    torch: JobTorch  # the job's, as its interpreter answered (the node model's ``node.torch``)
    cuda_home: CudaHome
    nvcc_on_path: tuple[NvccProbe, ...]
    other_toolkits: tuple[NvccProbe, ...]
    ninja: ToolProbe
    compiler: ToolProbe
    deepspeed: DeepSpeedFacts

    @property
    def first_nvcc(self) -> NvccProbe | None:
        """The ``nvcc`` a shell would run."""
        return self.nvcc_on_path[0] if self.nvcc_on_path else None


def probe_torch(torch_module: ModuleType | Any | None = None) -> JobTorch:
    """This interpreter's torch (or ``torch_module``) read in-process, as the torch child reads the job's:
    version, CUDA build, arch list and NCCL version, without initialising CUDA.

    The arch list is read from ``torch._C._cuda_getArchFlags()`` (what ``get_arch_list`` returns,
    a compile-time string); older ``get_arch_list`` called ``is_available()`` first, which we avoid.
    ``torch.cuda.nccl.version()`` returns the NCCL version torch was compiled against (header
    constants) and does not initialise CUDA either.
    """
    if torch_module is None:
        try:
            torch_module = importlib.import_module("torch")
        except Exception as exc:  # ImportError, or a broken install raising anything
            return JobTorch(python=sys.executable, problem=f"import torch failed: {exc}")
    version_module = getattr(torch_module, "version", None)
    cuda = getattr(version_module, "cuda", None)
    hip = getattr(version_module, "hip", None)
    arch_list: tuple[str, ...] = ()
    nccl: tuple[int, ...] | None = None
    suffix = ""
    if cuda is not None:
        arch_list = _arch_list(torch_module)
        nccl, suffix = _nccl_version(torch_module)
    return JobTorch(
        python=sys.executable,
        version=str(getattr(torch_module, "__version__", "unknown")),
        cuda=str(cuda) if cuda is not None else None,
        hip=str(hip) if hip is not None else None,
        arch_list=arch_list,
        nccl=nccl,
        nccl_suffix=suffix,
        wheels=_nccl_wheels(),
    )


def _arch_list(torch_module: Any) -> tuple[str, ...]:
    flags = getattr(getattr(torch_module, "_C", None), "_cuda_getArchFlags", None)
    if callable(flags):
        text = flags()
        return tuple(str(text).split()) if text else ()
    return tuple(torch_module.cuda.get_arch_list())


def _nccl_version(torch_module: Any) -> tuple[tuple[int, ...] | None, str]:
    if not hasattr(getattr(torch_module, "_C", None), "_nccl_version"):
        return None, ""
    try:
        raw = tuple(torch_module.cuda.nccl.version())
    except Exception:  # a build without NCCL raises from the C++ side
        return None, ""
    numbers = tuple(int(part) for part in raw if isinstance(part, int))
    suffix = next((str(part) for part in raw if isinstance(part, str)), "")
    return numbers, suffix


def _nccl_wheels() -> dict[str, str]:
    """``{"nvidia-nccl-cu12": "2.21.5"}``: the NCCL library pip installed next to torch."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-nccl"):
            found[name] = dist.version
    return found


def resolve_cuda_home(
    env: Mapping[str, str],
    *,
    which: Callable[[str], str | None],
    exists: Callable[[str], bool] = os.path.exists,
    default: str = "/usr/local/cuda",
) -> tuple[str | None, str]:
    """``(path, how)`` as ``torch.utils.cpp_extension._find_cuda_home`` finds it on Linux."""
    if env.get("CUDA_HOME"):
        return env["CUDA_HOME"], "env CUDA_HOME"
    if env.get("CUDA_PATH") is not None:  # reached with CUDA_HOME unset or empty
        if not env["CUDA_PATH"]:  # torch keeps "" (falsy): no toolkit, no further guess
            return None, "env CUDA_PATH set but empty"
        return env["CUDA_PATH"], "env CUDA_PATH"
    nvcc = which("nvcc")
    if nvcc is not None:
        return os.path.dirname(os.path.dirname(nvcc)), f"derived from the first nvcc on PATH, {nvcc}"
    if exists(default):
        return default, f"default {default}"
    return None, f"not found (no CUDA_HOME/CUDA_PATH, no nvcc on PATH, no {default})"


def nvcc_on_path(env: Mapping[str, str]) -> list[str]:
    """Every ``nvcc`` in PATH order (the first is what a shell and torch would use)."""
    found: list[str] = []
    for folder in env.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder or ".", "nvcc")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and candidate not in found:
            found.append(candidate)
    return found


def probe_nvcc(
    path: str, runner: CommandRunner, timeout_s: float = NVCC_TIMEOUT_S
) -> NvccProbe:
    """Run ``<path> --version`` under a deadline and parse it; failures are values."""
    resolved = os.path.realpath(path)
    headers = root_has_headers(path)
    if not os.path.isfile(path):
        return NvccProbe(path, resolved, None, "", f"{path} does not exist", headers)
    result = runner([path, "--version"], timeout_s=timeout_s)
    output = (result.stdout + result.stderr).strip()
    if not result.ok:
        return NvccProbe(path, resolved, None, output, result.describe_failure(), headers)
    try:
        return NvccProbe(path, resolved, parse_nvcc_version(result.stdout), output, None, headers)
    except NvccParseError as exc:
        return NvccProbe(path, resolved, None, output, str(exc), headers)


def root_has_headers(nvcc_path: str) -> bool:
    """Does the toolkit folder of ``<root>/bin/nvcc`` hold the CUDA runtime headers?"""
    root = os.path.dirname(os.path.dirname(nvcc_path))
    return os.path.isfile(os.path.join(root, "include", "cuda_runtime_api.h"))


def probe_tool(
    name: str, command: tuple[str, ...], source: str, env: Mapping[str, str], runner: CommandRunner
) -> ToolProbe:
    """Find ``command[0]`` on PATH and ask ``--version``; keep the first line of the answer."""
    path = command[0] if os.sep in command[0] else shutil.which(command[0], path=env.get("PATH", ""))
    if path is None or not os.path.exists(path):
        return ToolProbe(name, command, None, None, source, problem=f"{command[0]}: not found on PATH")
    result = runner([path, *command[1:], "--version"], timeout_s=TOOL_TIMEOUT_S)
    lines = (result.stdout + result.stderr).splitlines()
    first = next((line.strip() for line in lines if line.strip()), None)
    if not result.ok:
        return ToolProbe(name, command, path, first, source, problem=result.describe_failure())
    return ToolProbe(name, command, path, first, source)


def probe_compiler(env: Mapping[str, str], runner: CommandRunner) -> ToolProbe:
    """The C++ compiler torch's extension builder calls: ``$CXX``, else ``c++`` (Linux)."""
    cxx = env.get("CXX", "").strip()
    command = tuple(shlex.split(cxx)) if cxx else ("c++",)
    found = probe_tool("C++ compiler", command, "CXX" if cxx else "default c++", env, runner)
    others = tuple(
        name for name in ("g++", "clang++") if shutil.which(name, path=env.get("PATH", "")) is not None
    )
    return ToolProbe(found.name, found.command, found.path, found.version, found.source, found.problem, others)


def probe_toolkit(
    env: Mapping[str, str],
    *,
    runner: CommandRunner,
    torch: JobTorch,
    toolkit_glob: str = "/" + TOOLKIT_GLOB,
    default_cuda_home: str = "/" + DEFAULT_CUDA_HOME,
) -> ToolkitFacts:
    """Gather every toolkit fact once; each ``nvcc`` runs at most once (cached by real path).

    ``torch`` is the job's torch as its own interpreter answered (the node model, ``--python``): torch's
    build and the job's DeepSpeed are taken from it rather than from preflight's interpreter."""
    env = dict(env)
    cache: dict[str, NvccProbe] = {}

    def nvcc(path: str) -> NvccProbe:
        key = os.path.realpath(path)
        if key not in cache:
            cache[key] = probe_nvcc(path, runner)
        hit = cache[key]
        return hit if hit.path == path else replace(hit, path=path, root_has_headers=root_has_headers(path))

    on_path = tuple(nvcc(path) for path in nvcc_on_path(env))
    home_path, how = resolve_cuda_home(
        env, which=lambda name: shutil.which(name, path=env.get("PATH", "")), default=default_cuda_home
    )
    home_nvcc = None
    has_headers = False
    if home_path:
        candidate = os.path.join(home_path, "bin", "nvcc")
        home_nvcc = nvcc(candidate) if os.path.exists(candidate) else None
        has_headers = root_has_headers(candidate)
    seen = {probe.resolved for probe in on_path} | ({home_nvcc.resolved} if home_nvcc else set())
    others = tuple(
        nvcc(path)
        for path in sorted(glob.glob(os.path.join(toolkit_glob, "bin", "nvcc")))
        if os.path.realpath(path) not in seen
    )
    return ToolkitFacts(
        torch=torch,
        cuda_home=CudaHome(home_path, how, home_nvcc, has_headers),
        nvcc_on_path=on_path,
        other_toolkits=_unique(others),
        ninja=probe_tool("ninja", ("ninja",), "PATH", env, runner),
        compiler=probe_compiler(env, runner),
        deepspeed=probe_deepspeed(env, (torch.deepspeed_version, [Path(r) for r in torch.deepspeed_roots])),
    )


def _unique(probes: tuple[NvccProbe, ...]) -> tuple[NvccProbe, ...]:
    """Drop symlinked duplicates (``/usr/local/cuda`` -> ``/usr/local/cuda-12.4``)."""
    kept: dict[str, NvccProbe] = {}
    for probe in probes:
        kept.setdefault(probe.resolved, probe)
    return tuple(kept.values())
