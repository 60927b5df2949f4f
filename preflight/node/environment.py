"""The environment the job inherits, as one typed fact of the node.

It is the run's ``Transports.environ`` (preflight's own environment in a real run, a test's made-up one
otherwise), read once into :class:`JobEnvironment`. Every check, judge and probe that asks what the job
will inherit reads it here, by name, rather than ``os.environ``: what preflight's own process has is
not necessarily what the job inherits, and a test changes the job's environment only in the transport.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from preflight.parse.visible_devices import DEVICE_ORDER_VAR, VISIBLE_DEVICES_VAR

NCCL_PREFIX = "NCCL_"


@dataclass(frozen=True, slots=True)
class JobEnvironment(Mapping[str, str]):
    """The variables the job inherits (a read-only mapping), with the ones preflight reasons about by name."""

    variables: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        return self.variables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)

    @property
    def visible_devices(self) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` (None when unset: every GPU)."""
        return self.variables.get(VISIBLE_DEVICES_VAR)

    @property
    def device_order(self) -> str | None:
        """``CUDA_DEVICE_ORDER`` (None when unset: FASTEST_FIRST)."""
        return self.variables.get(DEVICE_ORDER_VAR)

    @property
    def nccl(self) -> dict[str, str]:
        """The ``NCCL_*`` variables NCCL reads when a communicator is created."""
        return {name: value for name, value in self.variables.items() if name.startswith(NCCL_PREFIX)}

    @property
    def path(self) -> str:
        """``PATH`` (empty when unset): where ``nvcc``, ``ninja`` and the compiler are found."""
        return self.variables.get("PATH", "")

    @property
    def cuda_home(self) -> str | None:
        """``CUDA_HOME`` as set (torch's extension builder falls back to ``CUDA_PATH``, then nvcc on PATH)."""
        return self.variables.get("CUDA_HOME")

    @property
    def torch_extensions_dir(self) -> str | None:
        """``TORCH_EXTENSIONS_DIR``: where the user's own JIT builds go (preflight never builds there)."""
        return self.variables.get("TORCH_EXTENSIONS_DIR")

    def as_dict(self) -> dict[str, str]:
        """A copy, for a child process's environment or a probe that adds to it."""
        return dict(self.variables)
