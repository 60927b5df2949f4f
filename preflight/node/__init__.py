"""One picture of the node: built once per run from one bundle of transports, answers cached and typed.

Every check and the report take their facts from here, so no two places can disagree about the node.
The NVML snapshot (one bounded walk, :mod:`preflight.probe.nvml_probe`) is started the moment the
node is built; the job's torch (asked in the job's interpreter, :mod:`preflight.node.torch`) by the
rehearsal launch's rank 0 when a launch starts, else by a probe child. Everything else is derived,
on first use:

- :attr:`Node.visible` and :attr:`Node.visible_gpus`: what ``CUDA_VISIBLE_DEVICES`` and
  ``CUDA_DEVICE_ORDER`` leave of NVML's GPUs, **in CUDA order** (cuda0 first);
- :attr:`Node.job_gpus`: the GPUs the job uses (the visible ones, the first ``--nproc`` of them);
- :attr:`Node.job`: the one answer to "how many ranks, on GPUs or not" that every check, the report
  and ``preflight merge`` use;
- :attr:`Node.launch_job`: the same answer before the job's torch has answered, for the one reader
  that must not wait for it: the rehearsal launch, which checks it against :attr:`Node.job` later;
- :attr:`Node.job_devices`: what each rank gets (a whole GPU, or the MIG slice CUDA enumerates there,
  :mod:`preflight.node.devices`); :attr:`Node.lost_gpus`: GPUs that fell off the bus;
- :attr:`Node.fabric`: how the GPUs are linked, from NVML's remote device types and fabric states and
  the NVSwitches on the PCI bus (:mod:`preflight.node.fabric`), and :attr:`Node.job_layout`;
- :attr:`Node.cuda`: the driver and the job's compute capabilities (:mod:`preflight.node.cuda`);
- :attr:`Node.toolkit`: torch's CUDA build, the CUDA toolkit, ninja, the compiler and DeepSpeed
  (:mod:`preflight.probe.toolkit`), from the job's environment (:attr:`Node.env`) and torch;
- :meth:`Node.smi_topology`: ``nvidia-smi topo -m`` through the command transport, with a short deadline
  once NVML has hung (the same driver answers both).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

from preflight.node.cuda import CudaFacts, cuda_facts
from preflight.node.devices import CudaDevice, job_devices
from preflight.node.environment import JobEnvironment
from preflight.node.fabric import Fabric, JobTopology, Layout, fabric_from, job_topology
from preflight.node.host import HostFacts
from preflight.node.torch import JobTorchAnswer
from preflight.probe.job_torch import JobTorch
from preflight.node.transports import Transports
from preflight.parse.visible_devices import (
    DEVICE_ORDER_VAR,
    VISIBLE_DEVICES_VAR,
    DeviceOrder,
    GpuIdentity,
    SelectorKind,
    VisibleDevices,
    VisibleDevicesError,
    parse_device_order,
    parse_visible_devices,
    resolve_visible_devices,
)
from preflight.probe.nvml_probe import NVML_TIMEOUT_S, probe_failed_error, take_snapshot
from preflight.probe.nvml_snapshot import GpuInfo, GpuReference, NvmlSnapshot
from preflight.probe.pci import PciGpus, nvidia_gpus_on_pci
from preflight.probe import toolkit as toolkit_probe  # a module: it imports node.torch, which imports us
from preflight.probe.topology import SMI_TIMEOUT_S, SmiTopology, read_smi_topology
from preflight.waits import waiting

CPU_RANKS = 2  # a CPU rehearsal on gloo: two ranks are the least that exercise a collective
AFTER_HUNG_DRIVER_S = 5.0
"""The deadline of every further driver call once NVML did not answer: ``nvidia-smi`` goes through the
same driver and waits on it just as long (issue 24: 132 s on a node whose NVML hung at 10 s)."""
T = TypeVar("T")


class _Background(Generic[T]):
    """A fact gathered in a thread started now; :meth:`get` waits for it."""

    def __init__(self, name: str, gather: Callable[[], T], on_error: Callable[[str], T], *, waiting_for: str = "",
                 timeout_s: float | None = None) -> None:
        self._found: list[T] = []
        self._on_error = on_error
        self._what = waiting_for  # what a reader waits for, for the live line (preflight.waits)
        self._until = time.monotonic() + timeout_s if timeout_s is not None else None
        self._thread = threading.Thread(target=self._gather, args=(gather,), name=name, daemon=True)
        self._thread.start()

    def _gather(self, gather: Callable[[], T]) -> None:
        try:
            self._found.append(gather())
        except Exception as exc:  # noqa: BLE001 - a probe that failed is a fact about the node, never a crash
            self._found.append(self._on_error(f"{type(exc).__name__}: {exc}"))

    def get(self) -> T:
        if self._what and self._thread.is_alive():
            with waiting(self._what, self._until):
                self._thread.join()
        self._thread.join()
        return self._found[0] if self._found else self._on_error("the probe ended without an answer")

    def ready(self) -> bool:
        """Whether :meth:`get` would answer at once."""
        return not self._thread.is_alive()


@dataclass(frozen=True, slots=True)
class Job:
    """What the job will run on: its GPUs (NVML indices, in CUDA order), its rank count, and why."""

    gpu_indices: tuple[int, ...]
    ranks: int
    on_gpu: bool
    source: str
    cuda_devices: int = 0  # devices torch sees (what every rank may address; P2P copies use them all)

    @property
    def gpu_count(self) -> int:
        """The job's GPUs (0 on a CPU rehearsal)."""
        return len(self.gpu_indices)

    def launches_like(self, other: Job) -> bool:
        """Whether a launch planned for ``other`` is a launch for this job (same ranks on the same GPUs)."""
        return (self.gpu_indices, self.ranks, self.on_gpu, self.cuda_devices) == (
            other.gpu_indices, other.ranks, other.on_gpu, other.cuda_devices)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the report."""
        return {"gpus": list(self.gpu_indices), "ranks": self.ranks, "on_gpu": self.on_gpu, "source": self.source,
                "cuda_devices": self.cuda_devices}


def cpu_job(nproc: int | None) -> Job:
    """A CPU rehearsal (``--cpu``): gloo ranks, whatever GPUs and torch there are."""
    ranks = nproc or CPU_RANKS
    return Job((), ranks, False, f"{ranks} CPU ranks on gloo (a CPU rehearsal, --cpu)")


def gpu_job(gpus: int, job_gpus: tuple[GpuInfo, ...], nproc: int | None, counted_by: str) -> Job:
    """A job on ``gpus`` devices (as ``counted_by`` counts them): ``--nproc`` ranks, else one per device,
    on the first that many of ``job_gpus``."""
    ranks = nproc or gpus
    source = f"{ranks} ranks ({'--nproc' if nproc else counted_by})"
    return Job(tuple(g.index for g in job_gpus[:ranks]), ranks, True, source, cuda_devices=gpus)


def decide_job(torch: JobTorch, job_gpus: tuple[GpuInfo, ...], nproc: int | None, cpu: bool = False) -> Job:
    """The job from what torch counts and which GPUs CUDA_VISIBLE_DEVICES leaves it.

    torch's count is what ``--nproc-per-node=gpu`` starts, so it decides the rank count; the visible
    GPUs (in CUDA order) say which they are. ``--nproc`` overrides the rank count and the job then
    uses the first that many GPUs, as ``--nproc-per-node=N`` does. ``cpu`` (``--cpu``) asks for a CPU
    rehearsal on gloo ranks, whatever GPUs there are."""
    if cpu:
        return cpu_job(nproc)
    gpus = torch.gpus
    if gpus:
        return gpu_job(gpus, job_gpus, nproc, "one per GPU torch sees")
    ranks = nproc or CPU_RANKS
    why = torch.problem or torch.device_count_error or (
        "torch is a CPU build" if not torch.is_cuda_build else "torch sees no GPU")
    return Job((), ranks, False, f"{ranks} CPU ranks on gloo ({'--nproc' if nproc else why})")


class Node:
    """The node's facts, each gathered once (the two slow ones from the start, side by side)."""

    def __init__(self, transports: Transports, *, nproc: int | None, cpu: bool = False,
                 nvml_timeout_s: Callable[[], float] = lambda: NVML_TIMEOUT_S) -> None:
        self.transports = transports
        self.env = JobEnvironment(dict(transports.environ))
        """The environment the job inherits (``Transports.environ``), read once."""
        self.nproc = nproc
        self.cpu_rehearsal = cpu
        self._torch = JobTorchAnswer(transports)  # asked by the launch's rank 0, else by the probe child

        def nvml_then_torch() -> NvmlSnapshot:
            snapshot = take_snapshot(transports.nvml, timeout_s=nvml_timeout_s(), runner=transports.run)
            if not snapshot.gpus and not cpu:
                self._torch.probe()  # no launch is planned from NVML: torch decides the job, ask it now
            return snapshot

        self._nvml = _Background("preflight-nvml-probe", nvml_then_torch,
                                 lambda why: NvmlSnapshot(label=transports.nvml.label,
                                                          error=probe_failed_error(why)),
                                 waiting_for="NVML (the GPU walk)", timeout_s=nvml_timeout_s())
        self._smi: SmiTopology | None = None

    # -- the two probed facts -----------------------------------------------------------------------

    @property
    def nvml(self) -> NvmlSnapshot:
        """Everything NVML said, from one bounded walk (``error`` says why there is nothing)."""
        return self._nvml.get()

    @property
    def torch(self) -> JobTorch:
        """The job's torch, asked in the job's interpreter."""
        return self._torch.get()

    def torch_answered_by(self, answer: Path, running: Callable[[], bool]) -> bool:
        """A launch is starting in the job's interpreter: its rank 0 answers the job's torch in ``answer``
        (the probe child is asked only if the launch ends without it); False when already asked."""
        return self._torch.from_launch(answer, running)

    def torch_known(self, answer: JobTorch, source: str) -> bool:
        """The job's torch was already asked in this process (by ``source``): no probe child asks it again.
        False when an answer was already on its way (a fake transport's, or a launch's)."""
        return self._torch.known(answer, source)

    def ask_torch(self) -> None:
        """No launch will answer: ask the probe child now, beside the rest of the run."""
        self._torch.probe()

    # -- what the job sees ----------------------------------------------------------------------------

    @cached_property
    def identities(self) -> tuple[GpuIdentity, ...]:
        """What visible-device resolution needs of each GPU NVML could identify."""
        return tuple(i for i in (g.identity() for g in self.nvml.gpus) if i is not None)

    @cached_property
    def visible(self) -> VisibleDevices | None:
        """The GPUs a CUDA process will see, in CUDA order; None when NVML lists no GPU."""
        if not self.nvml.gpus:
            return None
        try:
            order = parse_device_order(self.env.device_order)
        except VisibleDevicesError:
            order = DeviceOrder.FASTEST_FIRST  # the order check reports the bad value
        return resolve_visible_devices(parse_visible_devices(self.env.visible_devices), self.identities, order)

    @cached_property
    def visible_gpus(self) -> tuple[GpuInfo, ...]:
        """The visible GPUs in CUDA order, then any GPU NVML could not identify (lost: reported, never hidden)."""
        by_index = {g.index: g for g in self.nvml.gpus}
        chosen = [by_index[v.gpu.nvml_index] for v in self.visible.gpus] if self.visible else []
        lost = [g for g in self.nvml.gpus if g.identity() is None]
        return tuple(chosen + lost)

    @cached_property
    def job_gpus(self) -> tuple[GpuInfo, ...]:
        """The GPUs the job uses, in CUDA order: the visible ones, the first ``--nproc`` of them. A GPU NVML
        cannot identify (lost) is the job's unless ``CUDA_VISIBLE_DEVICES`` names the job's GPUs without it
        (CUDA does not enumerate a GPU that fell off the bus, so the variable's indices and UUIDs resolve
        among the others)."""
        identified = [g for g in self.visible_gpus if g.identity() is not None]
        lost = [g for g in self.visible_gpus if g.identity() is None]
        chosen = self.visible is not None and self.visible.setting.kind is not SelectorKind.ALL
        return tuple((identified[: self.nproc] if self.nproc else identified) + ([] if chosen else lost))

    @cached_property
    def job_sees(self) -> int:
        """How many GPUs the job will see: what CUDA_VISIBLE_DEVICES leaves of NVML's GPUs, or torch's own
        count where NVML cannot predict it (MIG: a process sees one slice)."""
        visible = self.visible
        if visible is None:
            return 0
        torch = self.torch
        if not visible.count_certain and torch.device_count is not None:
            return torch.device_count
        return visible.count

    @cached_property
    def job(self) -> Job:
        """The job's GPUs and ranks."""
        return decide_job(self.torch, self.job_gpus, self.nproc, self.cpu_rehearsal)

    @property
    def torch_ready(self) -> bool:
        """Whether the job's torch has answered (reading :attr:`torch` would not wait)."""
        return self._torch.ready()

    @property
    def launch_job(self) -> Job:
        """The job as the rehearsal launch needs it, decided without waiting for the job's torch where
        NVML (or ``--cpu``) suffices: the launch then starts while torch is still being imported. The
        rehearsal compares it with :attr:`job` before any check reads a phase and relaunches when they
        differ (torch counting other GPUs than NVML shows is itself a FAIL of the device checks)."""
        if self.cpu_rehearsal:
            return cpu_job(self.nproc)
        if self.torch_ready:
            return self.job
        visible = sum(1 for g in self.visible_gpus if g.identity() is not None)
        if not visible:
            return self.job  # NVML promises nothing: torch decides
        return gpu_job(visible, self.job_gpus, self.nproc, "one per GPU NVML shows the job")

    @cached_property
    def host(self) -> HostFacts:
        """The host's facts (shared memory, CPUs, RAM, processes, session, ...), each probed once."""
        return HostFacts(self.transports, self.env)

    @cached_property
    def pci_gpus(self) -> PciGpus:
        """NVIDIA GPUs (and NVSwitches) on the PCI bus (sysfs), whatever the driver says."""
        return nvidia_gpus_on_pci(self.transports.root)

    @cached_property
    def job_devices(self) -> tuple[CudaDevice, ...]:
        """What each of the job's GPUs gives a rank, in CUDA order: the GPU, or its MIG slice."""
        return job_devices(self.job_gpus, self.visible)

    @cached_property
    def lost_gpus(self) -> tuple[GpuInfo, ...]:
        """The job's GPUs that answered GPU_IS_LOST (fallen off the bus)."""
        return tuple(g for g in self.job_gpus if g.gpu_lost)

    @cached_property
    def fabric(self) -> Fabric:
        """How every GPU of the node is linked, from what the driver reports."""
        return fabric_from(self.nvml, len(self.pci_gpus.nvswitch_bus_ids))

    @cached_property
    def job_layout(self) -> Layout:
        """How the job's GPUs are connected to each other (SINGLE for one GPU)."""
        return self.fabric.layout([g.index for g in self.job_gpus if not g.gpu_lost])

    @cached_property
    def cuda(self) -> CudaFacts:
        """The driver and the compute capability of each of the job's GPUs."""
        return cuda_facts(self.nvml, self.job_gpus if self.nvml.gpus else ())

    @cached_property
    def toolkit(self) -> toolkit_probe.ToolkitFacts:
        """torch's CUDA build (the job's torch), the toolkit a JIT build would use (``CUDA_HOME``, ``nvcc`` on
        the job's PATH, ``/usr/local/cuda*`` under the filesystem root), ninja, the compiler and the job's
        DeepSpeed: every ``nvcc``/tool asked through the command runner."""
        root = self.transports.root
        return toolkit_probe.probe_toolkit(
            self.env, runner=self.transports.run, torch=self.torch, toolkit_glob=str(root / toolkit_probe.TOOLKIT_GLOB),
            default_cuda_home=str(root / toolkit_probe.DEFAULT_CUDA_HOME))

    @property
    def nvml_hung(self) -> bool:
        """True when the NVML walk did not answer in time (the driver is wedged)."""
        return self.nvml.error is not None and self.nvml.error.code == "NVML_TIMEOUT"

    def job_topology(self, budget_s: float = SMI_TIMEOUT_S) -> JobTopology:
        """The job's GPUs' links from NVML and from ``nvidia-smi topo -m`` (run once, within ``budget_s``)."""
        smi = self.smi_topology(budget_s)
        return job_topology(self.fabric, self.job_gpus, self.nvml.gpus, smi.matrix, smi.raw, smi.problem, smi.missing,
                            self.nvml.unavailable)

    def smi_topology(self, budget_s: float = SMI_TIMEOUT_S) -> SmiTopology:
        """``nvidia-smi topo -m`` (run once, within ``budget_s``; :data:`AFTER_HUNG_DRIVER_S` after NVML hung)."""
        if self._smi is None:
            timeout = min(SMI_TIMEOUT_S, budget_s, AFTER_HUNG_DRIVER_S if self.nvml_hung else SMI_TIMEOUT_S)
            self._smi = read_smi_topology(self.transports.run, max(1.0, timeout))
        return self._smi

    def gpu(self, index: int) -> GpuInfo:
        """The GPU at NVML ``index``."""
        return next(g for g in self.nvml.gpus if g.index == index)

    def gpu_reference(self, index: int) -> GpuReference | None:
        """The report's ``gpu`` field of a check about the GPU at NVML ``index`` (its ids and CUDA index),
        or None when NVML lists no such GPU."""
        found = [g for g in self.nvml.gpus if g.index == index]
        if not found:
            return None
        visible = self.visible
        cuda = next((v.cuda_index for v in visible.gpus if v.gpu.nvml_index == index), None) if visible else None
        return found[0].reference(cuda)

    # -- the report ------------------------------------------------------------------------------------

    def gpus_section(self) -> dict[str, Any]:
        """The report's ``gpus`` section: the driver, the variables, and the job's GPUs in CUDA order."""
        snapshot = self.nvml
        visible = self.visible
        cuda_index = {v.gpu.nvml_index: v.cuda_index for v in visible.gpus} if visible else {}
        return {
            **snapshot.as_dict(),
            "error": None if snapshot.error is None else f"{snapshot.error.code}: {snapshot.error.cause}",
            "nvml_walk_s": round(snapshot.duration_s, 3),
            VISIBLE_DEVICES_VAR: self.env.visible_devices,
            DEVICE_ORDER_VAR: self.env.device_order,
            "job_sees": visible.describe() if visible else "no GPU",
            "gpus": [{"cuda_index": cuda_index.get(g.index), **g.as_dict()} for g in self.job_gpus],
            "not_used_by_the_job": [g.index for g in snapshot.gpus if g not in self.job_gpus],
            "on_pci_bus": self.pci_gpus.count,
            "nvswitches_on_pci_bus": len(self.pci_gpus.nvswitch_bus_ids),
            "job_interconnect": self.job_layout.value if snapshot.gpus else None,
        }

    def as_dict(self, *, wait: bool = True) -> dict[str, Any]:
        """The node model's sections of the report. With ``wait`` off (a run interrupted at its start) a
        torch probe still running is not waited for: torch is "not known" and the job decided without it."""
        if wait or self._torch.ready():
            torch, job = self.torch, self.job
        else:
            torch = JobTorch(python=self.transports.python,
                             problem="not known: the run was interrupted before the job's torch answered")
            job = decide_job(torch, self.job_gpus, self.nproc, self.cpu_rehearsal)
        return {"torch": torch.as_dict(), "job": job.as_dict(), "gpus": self.gpus_section()}

    @property
    def can_launch(self) -> bool:
        """:attr:`can_rehearse` as the launch sees it before the job's torch answers (:attr:`launch_job`)."""
        return self.launch_job.on_gpu or self.cpu_rehearsal

    @property
    def can_rehearse(self) -> bool:
        """True when the distributed checks have something to run on: the job's GPUs, or a CPU rehearsal."""
        return self.job.on_gpu or self.cpu_rehearsal
