"""Asked in the job's own interpreter: what torch is there, and what it would see. Prints one JSON object.

Run as a script with the job's ``sys.path`` (:func:`preflight.probe.job_python.script_argv`: ``PYTHONPATH``
and the user site kept, as the ranks keep them; the working directory off it, so a stray ``./numpy``
folder cannot shadow the real one), never imported by preflight: the job's environment may not have
preflight installed (``--python``), so this file uses the standard library and torch only. No CUDA
context is created: ``torch.cuda.device_count()`` answers from NVML before CUDA is initialised
(torch/cuda/__init__.py ``_device_count_nvml``), except for ``MIG-`` lists, where torch falls back to
the CUDA runtime; this is a child process, so that is harmless here."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any


def _nccl(torch: Any) -> tuple[list[int] | None, str]:
    if torch.version.cuda is None or not hasattr(torch._C, "_nccl_version"):
        return None, ""
    try:
        raw = tuple(torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - a build without NCCL raises from the C++ side
        return None, ""
    return [int(p) for p in raw if isinstance(p, int)], next((str(p) for p in raw if isinstance(p, str)), "")


def _arch_list(torch: Any) -> list[str]:
    if torch.version.cuda is None:
        return []
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    if callable(flags):
        text = flags()
        return str(text).split() if text else []
    return list(torch.cuda.get_arch_list())


def _fsdp2_api() -> str | None:
    """Where ``fully_shard`` is exported (public ``torch.distributed.fsdp`` since 2.6, ``_composable.fsdp``
    in 2.4/2.5), read from the package's ``__init__`` without importing it: importing
    ``torch.distributed.fsdp`` costs 1.3 s here (it pulls in DTensor's op tables), every rank pays it
    anyway, and the probe runs beside the launch on the same cores."""
    import importlib.util

    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            spec = importlib.util.find_spec(where)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin:
            continue
        try:
            source = Path(spec.origin).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if re.search(r"\bfully_shard\b", source):
            return where
    return None


def _wheels() -> dict[str, str]:
    found = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-nccl") or name in ("deepspeed", "numpy", "ninja"):
            found[name] = dist.version
    return found


def _deepspeed() -> dict[str, Any] | None:
    """Where the job's DeepSpeed lives (its version and the folders holding its files), found without
    importing it: preflight reads its build rule and pre-built ops from there."""
    import importlib.util

    try:
        dist = importlib.metadata.distribution("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None
    roots = [str(dist.locate_file(""))]
    spec = importlib.util.find_spec("deepspeed")  # top-level: finds, does not execute
    if spec is not None and spec.submodule_search_locations:
        roots.extend(str(Path(p).parent) for p in spec.submodule_search_locations)
    return {"version": dist.version, "roots": roots}


def facts() -> dict[str, Any]:
    """Everything preflight asks of the job's torch."""
    out: dict[str, Any] = {"python": sys.executable, "python_version": sys.version.split()[0], "wheels": _wheels(),
                           "deepspeed": _deepspeed()}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything
        out["import_error"] = f"{type(exc).__name__}: {exc}"
        return out
    nccl, suffix = _nccl(torch)
    out.update({
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "arch_list": _arch_list(torch),
        "nccl": nccl,
        "nccl_suffix": suffix,
        "distributed": bool(torch.distributed.is_available()),
        "fsdp2_api": _fsdp2_api(),
        "bf16_arg_including_emulation": "including_emulation"
        in inspect.signature(torch.cuda.is_bf16_supported).parameters,
        "numpy": _numpy_usable(torch),
    })
    try:
        out["device_count"] = int(torch.cuda.device_count()) if torch.version.cuda is not None else 0
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError subclasses from C++
        out["device_count"] = None
        out["device_count_error"] = f"torch.cuda.device_count() failed: {exc}"
    return out


def _numpy_usable(torch: Any) -> str | None:
    """None when torch can convert through numpy (DCP needs it), else why not."""
    try:
        torch.zeros(1).numpy()
    except Exception as exc:  # noqa: BLE001 - RuntimeError "Numpy is not available", ImportError
        return f"{type(exc).__name__}: {exc}"
    return None


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")  # e.g. "Failed to initialize NumPy": reported as a fact, not noise
    # ``deepspeed``: only where DeepSpeed is (no torch import), for plans made before torch answers
    print(json.dumps(_deepspeed() if sys.argv[1:] == ["deepspeed"] else facts()))
