"""What one all-reduce sweep launch produced, as plain data shared by worker, check and judges.

The worker writes these figures as JSON from inside torchrun; the check rebuilds a
:class:`SweepRun` from the launcher's per-rank results; the judges read only this dataclass, so
they can be tested with hand-written runs (healthy, hung, failed) and no GPU.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class RunStatus(str, enum.Enum):
    """How a sweep ended: every rank reported (OK), one crashed (FAILED), it ran past its budget (HUNG), or the
    run's deadline stopped it or left it no time (NOT_RUN)."""

    OK = "ok"
    FAILED = "failed"
    HUNG = "hung"
    NOT_RUN = "not run"  # the run's deadline stopped it (or left no time to start it): not the node's fault


@dataclass(frozen=True, slots=True)
class SizeResult:
    """One message size: bytes per rank, mean time per all-reduce, nccl-tests bandwidths (GB = 10^9)."""

    bytes: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    correct: bool

    def __post_init__(self) -> None:
        for name in ("time_s", "algbw_gbps", "busbw_gbps"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.bytes <= 0:
            raise ValueError(f"bytes must be > 0, got {self.bytes!r}")

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "bytes": self.bytes,
            "time_s": self.time_s,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "correct": self.correct,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SizeResult:
        """Inverse of :meth:`as_dict`."""
        return cls(
            bytes=int(data["bytes"]),
            time_s=float(data["time_s"]),
            algbw_gbps=float(data["algbw_gbps"]),
            busbw_gbps=float(data["busbw_gbps"]),
            correct=bool(data["correct"]),
        )


@dataclass(frozen=True, slots=True)
class RankNote:
    """What one rank did: ``finished``, ``crashed`` (with exit code) or ``hung``, plus its log tail."""

    rank: int
    state: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepRun:
    """One launch of the all-reduce sweep."""

    label: str
    status: RunStatus
    backend: str
    world_size: int
    sizes: tuple[SizeResult, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    rank_notes: tuple[RankNote, ...] = ()
    nccl_log: str = ""
    deadline_s: float | None = None
    launch_summary: str = ""

    @property
    def ok(self) -> bool:
        """True when every rank finished and reported figures."""
        return self.status is RunStatus.OK and bool(self.sizes)

    @property
    def p2p_disabled(self) -> bool:
        """True when the run had ``NCCL_P2P_DISABLE`` set to a non-zero integer (how NCCL reads it)."""
        return env_flag_set(self.env.get("NCCL_P2P_DISABLE"))

    @property
    def peak(self) -> SizeResult | None:
        """The size with the highest busbw."""
        return max(self.sizes, key=lambda s: s.busbw_gbps) if self.sizes else None

    @property
    def largest(self) -> SizeResult | None:
        """The largest message size measured."""
        return max(self.sizes, key=lambda s: s.bytes) if self.sizes else None

    @property
    def wrong_sizes(self) -> tuple[SizeResult, ...]:
        """Sizes whose reduced values were not what every rank contributed."""
        return tuple(s for s in self.sizes if not s.correct)

    def busbw_at(self, nbytes: int) -> float | None:
        """busbw measured at exactly ``nbytes``, if that size was measured."""
        for size in self.sizes:
            if size.bytes == nbytes:
                return size.busbw_gbps
        return None

    def not_finished(self) -> tuple[RankNote, ...]:
        """Ranks that crashed or hung."""
        return tuple(n for n in self.rank_notes if n.state != "finished")


def env_flag_set(value: str | None) -> bool:
    """NCCL reads integer parameters with strtoll: only a non-zero integer switches a flag on."""
    if value is None:
        return False
    try:
        return int(value.strip(), 0) != 0
    except ValueError:
        return False
