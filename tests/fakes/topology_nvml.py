"""A fake of the NVML calls the topology probe makes, wired after a ``nvidia-smi topo -m`` matrix.

Building the fake from the same matrix the fake ``nvidia-smi`` prints keeps the two sources of one
test machine consistent, so a test changes exactly one thing (a GPU's links down, a query failing)
and sees what the checks make of it. Values NVML cannot give are the string ``NOT_SUPPORTED``
(anything that is not an int/bool, like the real backend's sentinel).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from preflight.parse.topo import TopoMatrix, nvlink_width

NOT_SUPPORTED = "NOT_SUPPORTED"
PCIE_LEVEL_CODES = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50, "SOC": 50}
P2P_OK = 0
P2P_NOT_SUPPORTED = 5


class FakeNvmlError(RuntimeError):
    """What the real backend raises for a failed query (a RuntimeError subclass)."""


@dataclass
class FakeTopologyNvml:
    """NVML answers for ``matrix``: every GPU has ``links_per_gpu`` NVLinks when any pair shows NV#."""

    matrix: TopoMatrix
    links_per_gpu: int = 18
    version: int = 6
    missing: frozenset[int] = frozenset()  # GPUs whose every NVLink is down
    down: frozenset[tuple[int, int]] = frozenset()  # (gpu, link) pairs that are down
    unavailable: str | None = None  # NVML cannot start: device_count raises this message
    failing: frozenset[str] = frozenset()  # method names that raise a query error
    calls: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, matrix: TopoMatrix, *, missing: Iterable[int] = (), down: Iterable[tuple[int, int]] = (),
              **kwargs: object) -> FakeTopologyNvml:
        has_nvlink = any(nvlink_width(code) for _, _, code in matrix.pairs())
        kwargs.setdefault("links_per_gpu", 18 if has_nvlink else 0)
        return cls(matrix, missing=frozenset(missing), down=frozenset(down), **kwargs)  # type: ignore[arg-type]

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.failing:
            raise FakeNvmlError(f"{name}: GPU is lost")

    def device_count(self) -> int:
        self._call("device_count")
        if self.unavailable:
            raise FakeNvmlError(f"NVML unavailable: {self.unavailable}")
        return len(self.matrix.gpus)

    def pci_bus_id(self, index: int) -> str:
        self._call("pci_bus_id")
        return f"00000000:{0x18 + 0x10 * index:02X}:00.0"

    def nvlink_state(self, index: int, link: int) -> bool | str:
        self._call("nvlink_state")
        if link >= self.links_per_gpu:
            return NOT_SUPPORTED
        return index not in self.missing and (index, link) not in self.down

    def nvlink_version(self, index: int, link: int) -> int | str:
        self._call("nvlink_version")
        return NOT_SUPPORTED if link >= self.links_per_gpu else self.version

    def p2p_status(self, index_a: int, index_b: int, caps: int) -> int:
        self._call("p2p_status")
        linked = nvlink_width(self.matrix.link(index_a, index_b)) is not None
        return P2P_OK if linked and not {index_a, index_b} & self.missing else P2P_NOT_SUPPORTED

    def common_ancestor(self, index_a: int, index_b: int) -> int | str:
        self._call("common_ancestor")
        code = self.matrix.link(index_a, index_b)
        return PCIE_LEVEL_CODES.get(code, 40)
