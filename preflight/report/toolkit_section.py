"""The report's ``toolkit`` node section: the toolkit probe's facts as plain JSON (torch's build, the
CUDA toolkit a JIT build would use, ninja, the compiler, DeepSpeed)."""

from __future__ import annotations

from typing import Any

from preflight.probe.toolkit import NvccProbe, ToolkitFacts, ToolProbe


def _nvcc(probe: NvccProbe | None) -> dict[str, Any] | None:
    if probe is None:
        return None
    return {
        "path": probe.path,
        "resolved": probe.resolved,
        "release": probe.version.release_text if probe.version else None,
        "version": probe.version.full_text if probe.version else None,
        "problem": probe.problem,
    }


def _tool(tool: ToolProbe) -> dict[str, Any]:
    return {"path": tool.path, "version": tool.version, "source": tool.source, "problem": tool.problem}


def toolkit_section(facts: ToolkitFacts) -> dict[str, Any]:
    """Plain JSON for the report's ``toolkit`` node section."""
    torch, home, ds = facts.torch, facts.cuda_home, facts.deepspeed
    return {
        "torch": {
            "version": torch.version,
            "cuda": torch.cuda,
            "hip": torch.hip,
            "build": "CUDA" if torch.cuda else ("ROCm" if torch.hip else "CPU"),
            "arch_list": list(torch.arch_list),
            "nccl": ".".join(str(part) for part in torch.nccl) + torch.nccl_suffix if torch.nccl else None,
            "nccl_wheels": dict(torch.nccl_wheels),
            "problem": torch.problem,
        },
        "cuda_home": {
            "path": home.path,
            "source": home.source,
            "used_by_torch": torch.is_cuda_build,
            "has_headers": home.has_headers,
            "nvcc": _nvcc(home.nvcc),
        },
        "nvcc_on_path": [_nvcc(probe) for probe in facts.nvcc_on_path],
        "other_toolkits": [_nvcc(probe) for probe in facts.other_toolkits],
        "ninja": _tool(facts.ninja),
        "compiler": _tool(facts.compiler),
        "deepspeed": {
            "version": ds.version,
            "DS_SKIP_CUDA_CHECK": ds.skip_cuda_check,
            "rule_source": ds.rule.source if ds.rule else None,
            "rule_problem": ds.rule_problem,
            "prebuilt_ops": list(ds.prebuilt_ops),
            "prebuilt_cuda": ds.prebuilt_cuda,
            "prebuilt_torch": ds.prebuilt_torch,
            "prebuilt_accelerator": ds.prebuilt_accelerator,
            "DS_ACCELERATOR": ds.accelerator_env,
        },
    }
