"""How the job's GPUs are linked, as far as the expected-busbw table needs it.

Two facts from the run's NVML snapshot (no NVML call of its own): whether every pair of the job's
GPUs reports NVLink peer-to-peer, and the lowest *maximum* PCIe generation of those GPUs (the
current generation drops at idle and would mislead; the maximum already accounts for the slot).
What NVML could not say is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preflight.probe.nvml_snapshot import NvmlSnapshot


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """GPU names in the job's order, NVLink between every pair (None: unknown), min PCIe generation."""

    names: tuple[str, ...]
    nvlink_all_pairs: bool | None
    pcie_gen: int | None


def gpu_links(snapshot: NvmlSnapshot, indices: Sequence[int]) -> GpuLinks:
    """Facts for the GPUs at NVML ``indices``."""
    gpus = [snapshot.gpu(index) for index in indices]
    names = tuple(str(g.name) if g is not None and isinstance(g.name, str) else "unknown GPU" for g in gpus)
    return GpuLinks(names, _nvlink_all_pairs(snapshot, indices), _min_pcie_gen(snapshot, indices))


def _nvlink_all_pairs(snapshot: NvmlSnapshot, indices: Sequence[int]) -> bool | None:
    """True when NVML reports NVLink P2P OK for every pair, False at the first pair without, None if unknown."""
    if len(indices) < 2:
        return None
    unknown = False
    for position, first in enumerate(indices):
        for second in indices[position + 1:]:
            pair = snapshot.pair(first, second)
            nvlink = None if pair is None else pair.nvlink
            if nvlink is None:
                unknown = True
            elif not nvlink:
                return False
    return None if unknown else True


def _min_pcie_gen(snapshot: NvmlSnapshot, indices: Sequence[int]) -> int | None:
    """Lowest maximum PCIe generation over the GPUs (the slowest hop the ring may cross)."""
    gens = []
    for index in indices:
        gpu = snapshot.gpu(index)
        if gpu is None or not isinstance(gpu.pcie_max, tuple):
            return None
        gens.append(gpu.pcie_max[0])
    return min(gens) if gens else None
