"""How the GPUs of the job are linked, as far as the expected-busbw table needs it.

Two facts from NVML (module ``pynvml`` of the ``nvidia-ml-py`` distribution): whether every pair
of GPUs reports NVLink peer-to-peer, and the lowest PCIe generation any GPU can reach in this
system (``nvmlDeviceGetMaxPcieLinkGeneration`` already accounts for the slot; the *current*
generation drops at idle and would mislead). Anything NVML cannot say is None, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """GPU names in index order, NVLink between every pair (None: unknown), min PCIe generation."""

    names: tuple[str, ...]
    nvlink_all_pairs: bool | None
    pcie_gen: int | None


def probe_gpu_links(count: int, nvml: Any | None = None) -> GpuLinks | None:
    """Facts for GPUs ``0..count-1``; None when NVML is unavailable (no driver, no GPU)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError subclasses vary by version; no NVML is a fact
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        names = tuple(_text(nvml.nvmlDeviceGetName(h)) for h in handles)
        return GpuLinks(names, _nvlink_all_pairs(nvml, handles), _min_pcie_gen(nvml, handles))
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvlink_all_pairs(nvml: Any, handles: list[Any]) -> bool | None:
    """True when NVML reports NVLink P2P OK for every pair; None when it cannot tell."""
    try:
        for i, first in enumerate(handles):
            for second in handles[i + 1:]:
                status = nvml.nvmlDeviceGetP2PStatus(first, second, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                if status != nvml.NVML_P2P_STATUS_OK:
                    return False
    except Exception:  # noqa: BLE001
        return None
    return len(handles) >= 2


def _min_pcie_gen(nvml: Any, handles: list[Any]) -> int | None:
    """Lowest maximum PCIe generation over the GPUs (the slowest hop the ring may cross)."""
    try:
        return min(int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)) for h in handles) if handles else None
    except Exception:  # noqa: BLE001
        return None
