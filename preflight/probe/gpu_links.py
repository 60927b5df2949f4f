"""How the job's GPUs are linked, as far as the expected-busbw table needs it.

Two facts from the session's NVML backend: whether every pair of GPUs reports NVLink
peer-to-peer, and the lowest *maximum* PCIe generation of the GPUs (the current generation drops at
idle and would mislead; the maximum already accounts for the slot). What NVML cannot say is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.probe.nvml import P2P_CAPS_NVLINK, Absent, NvmlBackend

P2P_STATUS_OK = 0


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """GPU names in the job's order, NVLink between every pair (None: unknown), min PCIe generation."""

    names: tuple[str, ...]
    nvlink_all_pairs: bool | None
    pcie_gen: int | None


def gpu_links(backend: NvmlBackend, indices: Sequence[int]) -> GpuLinks:
    """Facts for the GPUs at NVML ``indices``."""
    names = []
    for index in indices:
        try:
            names.append(str(backend.name(index)))
        except Exception:  # noqa: BLE001 - a GPU NVML cannot name is reported without a name
            names.append("unknown GPU")
    return GpuLinks(tuple(names), _nvlink_all_pairs(backend, indices), _min_pcie_gen(backend, indices))


def _nvlink_all_pairs(backend: NvmlBackend, indices: Sequence[int]) -> bool | None:
    """True when NVML reports NVLink P2P OK for every pair, False at the first pair without, None if unknown."""
    if len(indices) < 2:
        return None
    unknown = False
    for position, first in enumerate(indices):
        for second in indices[position + 1:]:
            try:
                status = backend.p2p_status(first, second, P2P_CAPS_NVLINK)
            except Exception:  # noqa: BLE001 - a pair NVML cannot query leaves the answer unknown
                status = Absent.QUERY_FAILED
            if isinstance(status, Absent):
                unknown = True
            elif status != P2P_STATUS_OK:
                return False
    return None if unknown else True


def _min_pcie_gen(backend: NvmlBackend, indices: Sequence[int]) -> int | None:
    """Lowest maximum PCIe generation over the GPUs (the slowest hop the ring may cross)."""
    gens = []
    for index in indices:
        try:
            link = backend.pcie_link(index, current=False)
        except Exception:  # noqa: BLE001 - a GPU NVML cannot query leaves the generation unknown
            return None
        if isinstance(link, Absent):
            return None
        gens.append(int(link[0]))
    return min(gens) if gens else None
