"""What each worker's phase returns, typed: read once, where the launch ends, so judges read fields.

A rank that finishes a phase writes ``rank<N>.<phase>.json`` (:mod:`preflight.workers.rehearsal`):
where it ran and how long it took (:class:`RankResult`), around the dict the phase function
returned. That dict has one shape per worker; each shape is a frozen dataclass here whose ``parse``
checks every field's type and says which field is wrong (:class:`MalformedResult`), so a result the
launcher cannot read becomes an error of that rank, never a judge's ``KeyError``. The workers stay
standard-library-only and keep writing JSON; this module is the one place that knows its shape.

A :class:`~preflight.launch.plan.Phase` names the parser of its result (``Phase.parse_output``): a
phase replaced by a test plugin keeps it, and a phase preflight declares no type for is read as
:class:`OtherResult`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from preflight.probe.sweep import SizeResult

T = TypeVar("T")
S = TypeVar("S", bound="StrategyResult")


class MalformedResult(ValueError):
    """A rank's result does not have the shape its worker writes (which field, and what it held)."""


@dataclass(frozen=True, slots=True)
class Fields:
    """One JSON object of a result, read field by field; ``where`` names it in errors (``result.checkpoint``)."""

    raw: Mapping[str, object]
    where: str = "result"

    @classmethod
    def of(cls, raw: object, where: str) -> Fields:
        """``raw`` as an object, or :class:`MalformedResult` when it is something else."""
        if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
            raise MalformedResult(f"{where} is {_kind(raw)}, expected an object")
        return cls(raw, where)

    def has(self, key: str) -> bool:
        """True when ``key`` is present (even as null)."""
        return key in self.raw

    def _value(self, key: str, required: bool) -> object:
        if key not in self.raw:
            if required:
                raise MalformedResult(f"{self.where}.{key} is missing")
            return None
        return self.raw[key]

    def _wrong(self, key: str, value: object, expected: str) -> MalformedResult:
        return MalformedResult(f"{self.where}.{key} is {_kind(value)}, expected {expected}")

    def integer(self, key: str) -> int:
        """A required integer."""
        value = self.opt_integer(key, required=True)
        if value is None:
            raise self._wrong(key, None, "an integer")
        return value

    def opt_integer(self, key: str, *, required: bool = False) -> int | None:
        """An integer or null (absent unless ``required``)."""
        value = self._value(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, value, "an integer")
        return value

    def number(self, key: str) -> float:
        """A required number (NaN and infinities included: a worker reports a diverged loss as it is)."""
        value = self.opt_number(key, required=True)
        if value is None:
            raise self._wrong(key, None, "a number")
        return value

    def opt_number(self, key: str, *, required: bool = False) -> float | None:
        """A number or null."""
        value = self._value(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, value, "a number")
        return float(value)

    def text(self, key: str) -> str:
        """A required string."""
        value = self.opt_text(key, required=True)
        if value is None:
            raise self._wrong(key, None, "a string")
        return value

    def opt_text(self, key: str, *, required: bool = False) -> str | None:
        """A string or null."""
        value = self._value(key, required)
        if value is None or isinstance(value, str):
            return value
        raise self._wrong(key, value, "a string")

    def flag(self, key: str) -> bool:
        """A required true or false."""
        value = self.opt_flag(key, required=True)
        if value is None:
            raise self._wrong(key, None, "true or false")
        return value

    def opt_flag(self, key: str, *, required: bool = False) -> bool | None:
        """True, false or null."""
        value = self._value(key, required)
        if value is None or isinstance(value, bool):
            return value
        raise self._wrong(key, value, "true or false")

    def numbers(self, key: str) -> tuple[float, ...]:
        """A required list of numbers."""
        numbers = []
        for index, item in enumerate(self._list(key)):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise self._wrong(f"{key}[{index}]", item, "a number")
            numbers.append(float(item))
        return tuple(numbers)

    def texts(self, key: str) -> tuple[str, ...]:
        """A required list of strings."""
        texts = []
        for index, item in enumerate(self._list(key)):
            if not isinstance(item, str):
                raise self._wrong(f"{key}[{index}]", item, "a string")
            texts.append(item)
        return tuple(texts)

    def child(self, key: str) -> Fields:
        """A required nested object."""
        return Fields.of(self._value(key, True), f"{self.where}.{key}")

    def children(self, key: str) -> tuple[Fields, ...]:
        """A required list of objects."""
        return tuple(Fields.of(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(self._list(key)))

    def _list(self, key: str) -> Sequence[object]:
        value = self._value(key, True)
        if not isinstance(value, list):
            raise self._wrong(key, value, "a list")
        return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return f"{type(value).__name__} {text[:40]}"
    return type(value).__name__


# -- the envelope every rank writes around a phase's output ----------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """Which device a rank used (``WorkerContext.device_identity``): ``cpu``, or a GPU by uuid or bus id."""

    kind: str
    id: str
    pid: int | None = None  # CPU ranks only
    name: str | None = None  # GPU ranks only
    uuid: str | None = None
    pci_bus_id: str | None = None

    @property
    def on_gpu(self) -> bool:
        """True for a CUDA device."""
        return self.kind == "cuda"

    @classmethod
    def parse(cls, raw: Fields) -> DeviceIdentity:
        """Read the ``device`` object of a rank's result."""
        return cls(kind=raw.text("kind"), id=raw.text("id"), pid=raw.opt_integer("pid"), name=raw.opt_text("name"),
                   uuid=raw.opt_text("uuid"), pci_bus_id=raw.opt_text("pci_bus_id"))


# -- DDP ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DdpResult:
    """One DDP step on one rank (``preflight.workers.ddp``): the parameters' digest must match across ranks."""

    loss: float
    step_time_s: float
    param_sha256: str
    param_sum: float
    peak_memory_bytes: int

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> DdpResult:
        """Read the DDP worker's dict."""
        f = Fields.of(raw, "result")
        return cls(loss=f.number("loss"), step_time_s=f.number("step_time_s"), param_sha256=f.text("param_sha256"),
                   param_sum=f.number("param_sum"), peak_memory_bytes=f.integer("peak_memory_bytes"))


# -- peer-to-peer copies -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class P2pDevice:
    """A CUDA device the copy worker saw: its ordinal, name and PCI bus id (None on a torch without it)."""

    index: int
    name: str
    pci_bus_id: str | None

    @classmethod
    def parse(cls, raw: Fields) -> P2pDevice:
        """Read one entry of ``devices``."""
        return cls(index=raw.integer("index"), name=raw.text("name"), pci_bus_id=raw.opt_text("pci_bus_id"))


@dataclass(frozen=True, slots=True)
class P2pPair:
    """One directed copy: peer access as CUDA reports it, then either the verified copy's figures or its error."""

    src: int
    dst: int
    can_access_peer: bool
    error: str | None
    mismatches: int | None  # None when the copy raised
    gbps: float | None  # None when it raised or delivered wrong data
    bytes: int | None = None  # the copy's figures: absent when it raised
    iterations: int | None = None
    first_bad_index: int | None = None

    @classmethod
    def parse(cls, raw: Fields) -> P2pPair:
        """Read one entry of ``pairs``."""
        return cls(src=raw.integer("src"), dst=raw.integer("dst"), can_access_peer=raw.flag("can_access_peer"),
                   error=raw.opt_text("error", required=True), mismatches=raw.opt_integer("mismatches", required=True),
                   gbps=raw.opt_number("gbps", required=True), bytes=raw.opt_integer("bytes"),
                   iterations=raw.opt_integer("iterations"), first_bad_index=raw.opt_integer("first_bad_index"))


@dataclass(frozen=True, slots=True)
class P2pResult:
    """The copy worker's answer (``preflight.workers.p2p``): rank 0's pairs, or why there were none.

    ``skipped`` on CPU ranks or with fewer than 2 GPUs; ``waited_for_rank0`` on the other ranks."""

    devices: tuple[P2pDevice, ...] = ()
    pairs: tuple[P2pPair, ...] = ()
    mib: int | None = None
    skipped: str | None = None
    waited_for_rank0: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> P2pResult:
        """Read the copy worker's dict."""
        f = Fields.of(raw, "result")
        return cls(devices=tuple(P2pDevice.parse(d) for d in f.children("devices")) if f.has("devices") else (),
                   pairs=tuple(P2pPair.parse(p) for p in f.children("pairs")) if f.has("pairs") else (),
                   mib=f.opt_integer("mib"), skipped=f.opt_text("skipped"),
                   waited_for_rank0=bool(f.opt_flag("waited_for_rank0")))


# -- the all-reduce sweep ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepSize:
    """One measured message size and the timed iterations it took."""

    figures: SizeResult
    iters: int

    @classmethod
    def parse(cls, raw: Fields) -> SweepSize:
        """Read one entry of ``sizes`` (figures :class:`SizeResult` rejects are malformed)."""
        try:
            figures = SizeResult(bytes=raw.integer("bytes"), time_s=raw.number("time_s"),
                                 algbw_gbps=raw.number("algbw_gbps"), busbw_gbps=raw.number("busbw_gbps"),
                                 correct=raw.flag("correct"))
        except MalformedResult:
            raise
        except ValueError as exc:
            raise MalformedResult(f"{raw.where}: {exc}") from None
        return cls(figures, raw.integer("iters"))


@dataclass(frozen=True, slots=True)
class SkippedSize:
    """A size the sweep did not measure, and why (it did not fit in memory, or the time budget was used)."""

    bytes: int
    reason: str

    @classmethod
    def parse(cls, raw: Fields) -> SkippedSize:
        """Read one entry of ``skipped``."""
        return cls(raw.integer("bytes"), raw.text("reason"))


@dataclass(frozen=True, slots=True)
class AllreduceResult:
    """The all-reduce sweep on one rank (``preflight.workers.allreduce``); every rank holds the same figures."""

    sizes: tuple[SweepSize, ...]
    skipped: tuple[SkippedSize, ...]
    world_size: int
    backend: str
    nccl_version: str | None
    sweep_s: float

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> AllreduceResult:
        """Read the sweep worker's dict."""
        f = Fields.of(raw, "result")
        return cls(sizes=tuple(SweepSize.parse(s) for s in f.children("sizes")),
                   skipped=tuple(SkippedSize.parse(s) for s in f.children("skipped")),
                   world_size=f.integer("world_size"), backend=f.text("backend"),
                   nccl_version=f.opt_text("nccl_version", required=True), sweep_s=f.number("sweep_s"))


# -- the strategies: FSDP2, ZeRO and the phase that loads DeepSpeed's ops ----------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A strategy's checkpoint round trip on one rank. When ``available`` every figure is there; when not,
    ``reason`` says why (FSDP2 without numpy writes only that; ZeRO's load that found nothing writes all)."""

    available: bool
    reason: str | None
    path: str
    save_s: float | None = None
    load_s: float | None = None
    bytes: int | None = None
    tensors: int | None = None
    mismatched: tuple[str, ...] = ()  # the first few names that differ
    mismatched_count: int | None = None
    differed_before_load: bool | None = None
    probe_loss_after_load: float | None = None
    removed: bool | None = None  # rank 0 removes the directory; None on the others

    @classmethod
    def parse(cls, raw: Fields) -> Checkpoint:
        """Read ``checkpoint``: the figures are required when the round trip was possible."""
        available = raw.flag("available")
        full = available or raw.has("save_s")
        return cls(available=available, reason=raw.opt_text("reason"), path=raw.text("path"),
                   save_s=raw.number("save_s") if full else None, load_s=raw.number("load_s") if full else None,
                   bytes=raw.integer("bytes") if full else None, tensors=raw.integer("tensors") if full else None,
                   mismatched=raw.texts("mismatched") if full else (),
                   mismatched_count=raw.integer("mismatched_count") if full else None,
                   differed_before_load=raw.flag("differed_before_load") if full else None,
                   probe_loss_after_load=raw.number("probe_loss_after_load") if full else None,
                   removed=raw.opt_flag("removed"))


@dataclass(frozen=True, slots=True)
class OpLoad:
    """One DeepSpeed op a rank loaded: how long it took and from where (``manifest``, ``deepspeed``, ``loaded``)."""

    op: str
    seconds: float
    source: str  # the worker's key is ``from``

    @classmethod
    def parse(cls, raw: Fields) -> OpLoad:
        """Read one entry of ``ops``."""
        return cls(raw.text("op"), raw.number("seconds"), raw.text("from"))


@dataclass(frozen=True, slots=True)
class OpsResult:
    """Phase ``deepspeed_ops`` on one rank (``preflight.workers.zero:ops_phase``): the wait and the loads."""

    ops: tuple[OpLoad, ...]
    seconds: float

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> OpsResult:
        """Read the ops phase's dict."""
        f = Fields.of(raw, "result")
        return cls(tuple(OpLoad.parse(op) for op in f.children("ops")), f.number("seconds"))


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """What every strategy rehearsal reports per rank (``tiny_model.summary`` and the round trip): losses
    averaged over ranks, this rank's own, step times, the probe loss, the gathered parameters' digest."""

    strategy: str
    api: str
    precision: str
    losses: tuple[float, ...]
    step_times_s: tuple[float, ...]
    step_time_s: float
    first_step_time_s: float | None
    local_losses: tuple[float, ...]
    probe_loss: float
    param_sha256: str
    parameters: int
    peak_memory_bytes: int
    memory_kind: str
    checkpoint: Checkpoint

    @property
    def losses_finite(self) -> bool:
        """True when there are losses and every one (global, local, probe) is a finite number."""
        values = (*self.losses, *self.local_losses, self.probe_loss)
        return bool(self.losses) and all(math.isfinite(v) for v in values)

    @classmethod
    def _read(cls: type[S], f: Fields, **own: object) -> S:
        """A strategy's result: the fields every strategy worker writes, read here, and the subclass's ``own``."""
        return cls(strategy=f.text("strategy"), api=f.text("api"), precision=f.text("precision"),
                   losses=f.numbers("losses"), step_times_s=f.numbers("step_times_s"),
                   step_time_s=f.number("step_time_s"), first_step_time_s=f.opt_number("first_step_time_s"),
                   local_losses=f.numbers("local_losses"), probe_loss=f.number("probe_loss"),
                   param_sha256=f.text("param_sha256"), parameters=f.integer("parameters"),
                   peak_memory_bytes=f.integer("peak_memory_bytes"), memory_kind=f.text("memory_kind"),
                   checkpoint=Checkpoint.parse(f.child("checkpoint")), **own)


@dataclass(frozen=True, slots=True)
class FsdpResult(StrategyResult):
    """FSDP2 on one rank (``preflight.workers.fsdp``): also the parameters' sum and this rank's shards' digest."""

    param_sum: float
    shard_sha256: str

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> FsdpResult:
        """Read the FSDP2 worker's dict (see :func:`parse_fsdp` for a phase that may not run)."""
        f = Fields.of(raw, "result")
        return cls._read(f, param_sum=f.number("param_sum"), shard_sha256=f.text("shard_sha256"))


@dataclass(frozen=True, slots=True)
class ZeroResult(StrategyResult):
    """DeepSpeed ZeRO on one rank (``preflight.workers.zero``): also its config, accelerator and op loads."""

    config: Mapping[str, object]  # the generated DeepSpeed config, reported as it is
    accelerator: str
    ops: tuple[OpLoad, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> ZeroResult:
        """Read the ZeRO worker's dict."""
        f = Fields.of(raw, "result")
        return cls._read(f, config=f.child("config").raw, accelerator=f.text("accelerator"),
                         ops=tuple(OpLoad.parse(op) for op in f.children("ops")))


@dataclass(frozen=True, slots=True)
class StrategyNotRun:
    """A strategy phase that returned at once (FSDP2 on CPU ranks of a torch before 2.7), saying why."""

    strategy: str
    reason: str

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> StrategyNotRun:
        """Read ``{"strategy": ..., "not_run": ...}``."""
        f = Fields.of(raw, "result")
        return cls(f.text("strategy"), f.text("not_run"))


def parse_fsdp(raw: Mapping[str, object]) -> FsdpResult | StrategyNotRun:
    """The FSDP2 phase's result: its figures, or why it did not run here."""
    return StrategyNotRun.parse(raw) if "not_run" in raw else FsdpResult.parse(raw)


# -- phases preflight declares no type for (test phases) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class OtherResult:
    """The dict of a phase whose shape preflight does not declare (a test's own phase), as it came."""

    values: Mapping[str, object]

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> OtherResult:
        """Keep the dict (it must be an object)."""
        return cls(Fields.of(raw, "result").raw)


PhaseOutput = (DdpResult | P2pResult | AllreduceResult | FsdpResult | ZeroResult | OpsResult | StrategyNotRun
               | OtherResult)
OutputParser = Callable[[Mapping[str, object]], PhaseOutput]


@dataclass(frozen=True, slots=True)
class RankResult:
    """What one rank wrote when it finished a phase: where it ran, how long the phase took, and the output."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: DeviceIdentity
    phase: str
    duration_s: float
    notes: tuple[str, ...]
    output: PhaseOutput

    @classmethod
    def parse(cls, raw: object, parse_output: OutputParser = OtherResult.parse) -> RankResult:
        """Read a rank's ``rank<N>.<phase>.json`` (already decoded); :class:`MalformedResult` names the field."""
        f = Fields.of(raw, "the result file")
        return cls(rank=f.integer("rank"), world_size=f.integer("world_size"), local_rank=f.integer("local_rank"),
                   backend=f.text("backend"), device=DeviceIdentity.parse(f.child("device")), phase=f.text("phase"),
                   duration_s=f.number("duration_s"), notes=f.texts("notes"),
                   output=parse_output(f.child("result").raw))

    def output_as(self, kind: type[T]) -> T:
        """The output as ``kind``; TypeError when the phase's parser gave another (a check read the wrong phase)."""
        if not isinstance(self.output, kind):
            raise TypeError(f"rank {self.rank}'s {self.phase} result is a {type(self.output).__name__}, "
                            f"not a {kind.__name__}")
        return self.output


@dataclass(frozen=True, slots=True)
class RankError:
    """What a rank wrote when its phase (or its start-up) raised, ``rank<N>.<phase>.error.json``: the
    exception as ``Type: message`` and when (the first error in time is the likely root cause)."""

    error: str
    time: float | None

    @classmethod
    def read(cls, path: Path) -> RankError | None:
        """The error file, or None when there is none (or it is not a JSON object). Read leniently: a rank
        that wrote one raised, whatever it holds."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        when = data.get("time")
        return cls(str(data.get("error")),
                   float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None)


def read_rank_result(path: Path, parse_output: OutputParser) -> RankResult | None:
    """A rank's result file, parsed; None when it is missing or not a JSON object (as if never written: the
    rank's error file or exit code then says what happened). :class:`MalformedResult` for a wrong shape."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return RankResult.parse(data, parse_output) if isinstance(data, dict) else None
