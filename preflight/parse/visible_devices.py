"""``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``, read the way CUDA reads them.

What was checked, and where:

- CUDA Programming Guide, "CUDA Environment Variables" (NVIDIA docs, seen through the docs
  search): entries are integer indices or ``GPU-`` UUIDs; a UUID may be abbreviated to any prefix
  that identifies one GPU; devices are enumerated in the order of the sequence; "if one of the
  indices is invalid, only the devices whose index precedes the invalid index are visible"
  (``0,2,-1,1`` gives devices 0 and 2). MIG devices are named ``MIG-<uuid>`` (R470+) or
  ``MIG-GPU-<uuid>/<gi>/<ci>`` (older drivers). ``CUDA_DEVICE_ORDER`` is ``FASTEST_FIRST``
  (default) or ``PCI_BUS_ID``; only ``PCI_BUS_ID`` matches ``nvidia-smi``/NVML numbering.
- NVIDIA MPS docs (deploy/topics/topic_5_2_1): UUID prefixes must include ``GPU-``.
- torch ``torch/cuda/__init__.py`` ``_parse_visible_devices`` / ``_transform_uuid_to_ordinals``
  (pytorch PRs #84879, #92315): integers are read like ``strtoul`` (``1gpu2`` is 1, leading and
  trailing spaces ignored), a repeated entry makes the whole set empty, the first invalid entry
  ends the list, an ambiguous UUID prefix is invalid, a list is all indices or all UUIDs (a
  ``GPU-`` entry in an index list, or the reverse, ends it). ``torch.cuda.device_count()`` is
  what ``torchrun --nproc-per-node=gpu`` starts, so where CUDA's own text is silent preflight
  follows torch.
- microsoft/onnxruntime PR #28066: FASTEST_FIRST orders by compute capability (descending), then
  PCI bus id. NVIDIA calls it "a simple heuristic" and does not document it, so an order derived
  for GPUs of different models is marked uncertain.
- MIG user guide via pytorch/pytorch#130181: a CUDA process enumerates only one MIG device.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

DEVICE_ORDER_VAR = "CUDA_DEVICE_ORDER"
VISIBLE_DEVICES_VAR = "CUDA_VISIBLE_DEVICES"


class VisibleDevicesError(ValueError):
    """An environment value or bus id that cannot be read with certainty."""


class DeviceOrder(str, enum.Enum):
    """How CUDA numbers GPUs before ``CUDA_VISIBLE_DEVICES`` picks among them."""

    FASTEST_FIRST = "FASTEST_FIRST"
    PCI_BUS_ID = "PCI_BUS_ID"


class SelectorKind(str, enum.Enum):
    """What the variable names: everything, nothing, indices, GPU UUIDs or MIG UUIDs."""

    ALL = "all"  # unset
    NONE = "none"  # empty or blank
    INDEX = "index"
    GPU_UUID = "gpu-uuid"
    MIG_UUID = "mig-uuid"


def parse_device_order(raw: str | None) -> DeviceOrder:
    """``CUDA_DEVICE_ORDER``: unset means FASTEST_FIRST; any other unknown value raises."""
    if raw is None:
        return DeviceOrder.FASTEST_FIRST
    try:
        return DeviceOrder(raw)
    except ValueError:
        raise VisibleDevicesError(
            f"{DEVICE_ORDER_VAR}={raw!r} is neither FASTEST_FIRST nor PCI_BUS_ID (CUDA's handling is undocumented)"
        ) from None


_BUS_ID = re.compile(r"^\s*(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])\s*$")


def bus_id_key(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of ``00000000:18:00.0`` or ``0000:18:00.0`` (CUDA's spelling)."""
    match = _BUS_ID.match(bus_id)
    if match is None:
        raise VisibleDevicesError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, device, function = match.groups()
    return (int(domain or "0", 16), int(bus, 16), int(device, 16), int(function))


@dataclass(frozen=True, slots=True)
class VisibleDevicesSetting:
    """The variable on its own: what CUDA keeps before it knows the GPUs."""

    raw: str | None
    kind: SelectorKind
    entries: tuple[str, ...] = ()  # kept entries as written (indices stripped of spaces)
    indices: tuple[int, ...] = ()  # the numbers CUDA reads, for kind INDEX
    stop: str | None = None  # the entry where CUDA stops reading
    duplicate: str | None = None  # a repeated entry: CUDA then sees no GPU at all
    problems: tuple[str, ...] = ()  # what CUDA does differently from what was likely meant

    @property
    def malformed(self) -> bool:
        """True when CUDA reads less (or other) than what was written."""
        return bool(self.problems)


def _strtoul(text: str) -> int:
    """The leading integer of ``text`` as torch reads it (``"1gpu2"`` -> 1), or -1 if none/negative."""
    match = re.match(r"[+-]?[0-9]+", text)
    return int(match.group()) if match else -1


def parse_visible_devices(raw: str | None) -> VisibleDevicesSetting:
    """Read ``CUDA_VISIBLE_DEVICES`` by CUDA's rules (see the module docstring). Never raises."""
    if raw is None:
        return VisibleDevicesSetting(raw=None, kind=SelectorKind.ALL)
    if raw == "":
        return VisibleDevicesSetting(
            raw=raw, kind=SelectorKind.NONE, problems=("set to the empty string: CUDA sees no GPU",)
        )
    if raw.strip() == "":
        return VisibleDevicesSetting(raw=raw, kind=SelectorKind.NONE, problems=("only spaces: CUDA sees no GPU",))
    for prefix, kind in (("GPU-", SelectorKind.GPU_UUID), ("MIG-", SelectorKind.MIG_UUID)):
        if raw.startswith(prefix):
            return _parse_uuids(raw, prefix, kind)
    return _parse_indices(raw)


def _parse_indices(raw: str) -> VisibleDevicesSetting:
    items = raw.split(",")
    kept: list[int] = []
    entries: list[str] = []
    problems: list[str] = []
    for position, item in enumerate(items):
        text = item.strip()
        value = _strtoul(text)
        if value in kept:
            return VisibleDevicesSetting(
                raw=raw,
                kind=SelectorKind.INDEX,
                duplicate=text,
                problems=(f"index {value} appears twice: CUDA then sees no GPU at all",),
            )
        if value < 0:
            rest = [r.strip() for r in items[position + 1 :] if r.strip()]
            if text or rest:
                what = "an empty entry" if not text else repr(text)
                tail = f"; {', '.join(rest)} ignored" if rest else ""
                problems.append(f"CUDA stops reading at {what}{tail}")
            return VisibleDevicesSetting(
                raw=raw,
                kind=SelectorKind.INDEX,
                entries=tuple(entries),
                indices=tuple(kept),
                stop=text,
                problems=tuple(problems),
            )
        if not re.fullmatch("[0-9]+", text):
            problems.append(f"{text!r} is read as {value}")
        kept.append(value)
        entries.append(text)
    return VisibleDevicesSetting(
        raw=raw, kind=SelectorKind.INDEX, entries=tuple(entries), indices=tuple(kept), problems=tuple(problems)
    )


def _parse_uuids(raw: str, prefix: str, kind: SelectorKind) -> VisibleDevicesSetting:
    items = raw.split(",")
    kept: list[str] = []
    for position, item in enumerate(items):
        if item in kept:
            return VisibleDevicesSetting(
                raw=raw, kind=kind, duplicate=item, problems=(f"{item} appears twice: CUDA then sees no GPU at all",)
            )
        if not item.startswith(prefix):
            rest = [r for r in items[position + 1 :] if r.strip()]
            problems: list[str] = []
            if item.strip() or rest:
                reason = "an empty entry" if not item.strip() else repr(item)
                if item.strip().startswith(prefix):
                    reason += " (spaces around it)"
                tail = f"; {', '.join(r.strip() for r in rest)} ignored" if rest else ""
                problems.append(f"CUDA stops reading at {reason}{tail}")
            return VisibleDevicesSetting(raw=raw, kind=kind, entries=tuple(kept), stop=item, problems=tuple(problems))
        kept.append(item)
    return VisibleDevicesSetting(raw=raw, kind=kind, entries=tuple(kept))


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What the resolver needs to know about one physical GPU (from NVML)."""

    nvml_index: int
    uuid: str
    pci_bus_id: str
    name: str
    compute_capability: tuple[int, int] | None = None
    mig_enabled: bool = False
    mig_uuids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VisibleGpu:
    """One GPU the job will see, at CUDA ordinal ``cuda_index``."""

    cuda_index: int
    gpu: GpuIdentity
    selected_by: str  # the entry that picked it, or "(unset)"
    mig_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class VisibleDevices:
    """The GPUs a CUDA process will see, in CUDA order, joined to NVML by UUID and bus id."""

    setting: VisibleDevicesSetting
    order: DeviceOrder
    gpus: tuple[VisibleGpu, ...]
    certain: bool  # False when CUDA's choice or order cannot be derived from NVML with certainty
    count_certain: bool  # False when even the number of devices cannot be (MIG)
    problems: tuple[str, ...]  # the setting's problems plus those found against the GPU list
    notes: tuple[str, ...]  # why the answer is uncertain

    @property
    def count(self) -> int:
        """Number of GPUs the job will see."""
        return len(self.gpus)

    def describe(self) -> str:
        """``cuda0 = GPU 2 (00000000:3A:00.0), cuda1 = GPU 0 (...)`` or ``no GPU``."""
        if not self.gpus:
            return "no GPU"
        return ", ".join(f"cuda{v.cuda_index} = GPU {v.gpu.nvml_index} ({v.gpu.pci_bus_id})" for v in self.gpus)


def cuda_enumeration(gpus: Sequence[GpuIdentity], order: DeviceOrder) -> tuple[tuple[GpuIdentity, ...], bool]:
    """All GPUs in CUDA's order before the variable applies, and whether that order is certain."""
    by_bus = sorted(gpus, key=lambda g: bus_id_key(g.pci_bus_id))
    if order is DeviceOrder.PCI_BUS_ID:
        return tuple(by_bus), True
    kinds = {(g.name, g.compute_capability) for g in gpus}
    if len(kinds) <= 1:
        return tuple(by_bus), True
    fastest = sorted(by_bus, key=lambda g: tuple(-part for part in (g.compute_capability or (0, 0))))
    return tuple(fastest), False


def resolve_visible_devices(
    setting: VisibleDevicesSetting, gpus: Sequence[GpuIdentity], order: DeviceOrder
) -> VisibleDevices:
    """Which physical GPUs the job sees, in CUDA order. Joins by UUID and bus id, never by index."""
    enumerated, order_certain = cuda_enumeration(gpus, order)
    problems = list(setting.problems)
    notes: list[str] = []
    chosen: list[VisibleGpu] = []
    uses_order = setting.kind in (SelectorKind.ALL, SelectorKind.INDEX)
    if setting.kind is SelectorKind.ALL:
        chosen = [VisibleGpu(i, gpu, "(unset)") for i, gpu in enumerate(enumerated)]
    elif setting.kind is SelectorKind.INDEX and setting.duplicate is None:
        for cuda_index, value in enumerate(setting.indices):
            if value >= len(enumerated):
                problems.append(f"index {value} but only {len(enumerated)} GPU(s): CUDA stops reading there")
                break
            chosen.append(VisibleGpu(cuda_index, enumerated[value], setting.entries[cuda_index]))
    elif setting.kind is SelectorKind.GPU_UUID and setting.duplicate is None:
        chosen = _pick_by_uuid(setting.entries, [(g.uuid, g, None) for g in gpus], problems)
    elif setting.kind is SelectorKind.MIG_UUID and setting.duplicate is None:
        candidates: list[tuple[str, GpuIdentity, str | None]] = [(mig, g, mig) for g in gpus for mig in g.mig_uuids]
        candidates += [(f"MIG-{g.uuid}", g, None) for g in gpus if g.mig_enabled]
        chosen = _pick_by_uuid(setting.entries, candidates, problems)
        if len(chosen) > 1:
            notes.append(f"{len(chosen)} MIG devices named, but a CUDA process enumerates only the first one")
            chosen = chosen[:1]
    certain = count_certain = True
    if uses_order and not order_certain and chosen:
        certain = False
        notes.append(
            "GPUs of different models under FASTEST_FIRST: CUDA orders them by an undocumented "
            "heuristic (compute capability first, then bus id, as observed); set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    mig_parents = sorted({v.gpu.nvml_index for v in chosen if v.gpu.mig_enabled and v.mig_uuid is None})
    if mig_parents and setting.kind is not SelectorKind.MIG_UUID:
        certain = count_certain = False
        listed = ", ".join(str(i) for i in mig_parents)
        notes.append(
            f"MIG is enabled on GPU {listed}: CUDA shows MIG devices there, not the GPU, and only one per process"
        )
    return VisibleDevices(setting, order, tuple(chosen), certain, count_certain, tuple(problems), tuple(notes))


def _pick_by_uuid(
    entries: Sequence[str], candidates: Sequence[tuple[str, GpuIdentity, str | None]], problems: list[str]
) -> list[VisibleGpu]:
    """Unique-prefix matching; the first unknown or ambiguous entry ends the list, a repeat empties it."""
    chosen: list[VisibleGpu] = []
    for entry in entries:
        key = entry.split("/", 1)[0] if entry.startswith("MIG-GPU-") else entry
        matches = [c for c in candidates if c[0].startswith(key)]
        if not matches:
            problems.append(f"{entry} matches no GPU here: CUDA stops reading there")
            break
        if len(matches) > 1:
            problems.append(f"{entry} matches {len(matches)} devices: an ambiguous prefix, CUDA stops reading there")
            break
        _, gpu, mig = matches[0]
        if any(v.gpu.nvml_index == gpu.nvml_index and v.mig_uuid == mig for v in chosen):
            problems.append(f"{entry} names a device already listed: CUDA then sees no GPU at all")
            return []
        chosen.append(VisibleGpu(len(chosen), gpu, entry, mig))
    return chosen
