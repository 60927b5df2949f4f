"""Facts about the host a training job depends on: /dev/shm, container, memlock, disk, CPU, RAM.

Every probe takes its inputs (paths, a ``statvfs``, ``getrlimit``) as arguments so the tests can
point it at a fake ``/proc`` and ``/sys`` under ``tmp_path``. Probes never judge: a missing file
or a refused call is recorded as a value (``None`` plus a ``problem`` string), never raised.
"""

from __future__ import annotations

import math
import os
import resource
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/")

UNLIMITED_CGROUP = 2**60
"""cgroup limits at or above this are "no limit" (v1 writes 9223372036854771712)."""

StatVfs = Callable[[str], os.statvfs_result]


@dataclass(frozen=True, slots=True)
class ShmFacts:
    """Size of the shared-memory mount NCCL's SHM transport and DataLoader workers use."""

    path: str
    total_bytes: int | None
    free_bytes: int | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerFacts:
    """Whether we run inside a container, which kind, and the files or variables that say so."""

    in_container: bool
    kind: str | None
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MemlockFacts:
    """``ulimit -l`` in bytes (None = unlimited) and the RDMA devices that would need it."""

    soft_bytes: int | None
    hard_bytes: int | None
    rdma_devices: tuple[str, ...]
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class DiskFacts:
    """Free space and writability where checkpoints go (or its nearest existing parent)."""

    path: str
    exists: bool
    checked_path: str
    free_bytes: int | None
    total_bytes: int | None
    writable: bool | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class CpuMemoryFacts:
    """CPUs and RAM this process may use, including cgroup (container) limits."""

    logical_cpus: int | None
    usable_cpus: int | None
    cgroup_cpu_limit: float | None
    mem_total_bytes: int | None
    mem_available_bytes: int | None
    cgroup_memory_limit_bytes: int | None

    @property
    def effective_cpus(self) -> int | None:
        """CPUs the job can really use: the affinity mask, capped by a cgroup CPU quota."""
        counts = [c for c in (self.usable_cpus or self.logical_cpus,) if c]
        if self.cgroup_cpu_limit is not None:
            counts.append(max(1, math.floor(self.cgroup_cpu_limit)))
        return min(counts) if counts else None

    @property
    def effective_memory_bytes(self) -> int | None:
        """RAM the job can really use: MemTotal, capped by a cgroup memory limit."""
        values = [v for v in (self.mem_total_bytes, self.cgroup_memory_limit_bytes) if v]
        return min(values) if values else None


def probe_shm(path: str = "/dev/shm", statvfs: StatVfs = os.statvfs) -> ShmFacts:
    """``df /dev/shm``: total and free bytes, or why they could not be read."""
    try:
        stats = statvfs(path)
    except FileNotFoundError:
        return ShmFacts(path, None, None, problem=f"{path} does not exist")
    except OSError as exc:
        return ShmFacts(path, None, None, problem=f"statvfs({path}) failed: {exc.strerror or exc}")
    return ShmFacts(path, stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize)


def probe_container(root: Path, env: Mapping[str, str]) -> ContainerFacts:
    """Container detection from ``/.dockerenv``, ``/run/.containerenv``, ``/proc/1/cgroup`` and the job's
    environment (``container=``, ``KUBERNETES_SERVICE_HOST``)."""
    evidence: list[str] = []
    kinds: list[str] = []
    if (root / ".dockerenv").exists():
        evidence.append("/.dockerenv exists")
        kinds.append("docker")
    if (root / "run/.containerenv").exists():
        evidence.append("/run/.containerenv exists")
        kinds.append("podman")
    if env.get("container"):
        evidence.append(f"container={env['container']}")
        kinds.append(env["container"])
    if env.get("KUBERNETES_SERVICE_HOST"):
        evidence.append("KUBERNETES_SERVICE_HOST is set")
        kinds.append("kubernetes")
    cgroup = _read(root / "proc/1/cgroup")
    for marker, kind in (("kubepods", "kubernetes"), ("docker", "docker"), ("libpod", "podman"),
                         ("containerd", "containerd"), ("lxc", "lxc")):
        if cgroup and marker in cgroup:
            line = next(line for line in cgroup.splitlines() if marker in line)
            evidence.append(f"/proc/1/cgroup: {line.strip()}")
            kinds.append(kind)
            break
    container_kind = "kubernetes" if "kubernetes" in kinds else (kinds[0] if kinds else None)
    return ContainerFacts(in_container=bool(kinds), kind=container_kind, evidence=tuple(evidence))


def limits_of(path: Path) -> Callable[[int], tuple[int, int]]:
    """A ``getrlimit`` for RLIMIT_MEMLOCK read from ``/proc/<pid>/limits`` ("Max locked memory  65536
    65536  bytes", proc(5)); OSError when the file cannot be read."""

    def getrlimit(which: int) -> tuple[int, int]:
        for line in path.read_text().splitlines():
            if line.startswith("Max locked memory"):
                soft, hard = line[len("Max locked memory"):].split()[:2]
                return _rlimit(soft), _rlimit(hard)
        raise OSError(f"{path}: no 'Max locked memory' line")

    return getrlimit


def _rlimit(text: str) -> int:
    return resource.RLIM_INFINITY if text == "unlimited" else int(text)


def probe_memlock(
    getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
    rdma_dir: Path = ROOT / "sys/class/infiniband",
) -> MemlockFacts:
    """``ulimit -l`` (soft, hard) in bytes and the RDMA devices in ``/sys/class/infiniband``."""
    devices = tuple(sorted(p.name for p in rdma_dir.iterdir())) if rdma_dir.is_dir() else ()
    try:
        soft, hard = getrlimit(resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError) as exc:
        return MemlockFacts(None, None, devices, problem=f"getrlimit(RLIMIT_MEMLOCK) failed: {exc}")
    return MemlockFacts(_limit(soft), _limit(hard), devices)


def probe_disk(
    path: str,
    statvfs: StatVfs = os.statvfs,
    write_test: Callable[[Path], tuple[bool, str | None]] | None = None,
) -> DiskFacts:
    """Free space and a real write test (a temporary file, removed) in ``path`` or its parent."""
    target = Path(path).expanduser().absolute()
    exists = target.is_dir()
    checked = target
    while not checked.is_dir() and checked != checked.parent:
        checked = checked.parent
    if target.exists() and not exists:
        return DiskFacts(str(target), False, str(target), None, None, False, problem=f"{target} is not a directory")
    try:
        stats = statvfs(str(checked))
        free, total = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
    except OSError as exc:
        return DiskFacts(str(target), exists, str(checked), None, None, None, problem=f"statvfs failed: {exc}")
    writable, problem = (write_test or _write_test)(checked)
    return DiskFacts(str(target), exists, str(checked), free, total, writable, problem)


def probe_cpu_memory(
    root: Path = ROOT,
    cpu_count: Callable[[], int | None] = os.cpu_count,
    affinity: Callable[[], set[int]] | None = None,
) -> CpuMemoryFacts:
    """CPU count, affinity mask, cgroup CPU quota; ``/proc/meminfo`` and the cgroup memory limit."""
    get_affinity = affinity if affinity is not None else _own_affinity
    try:
        usable: int | None = len(get_affinity())
    except OSError:
        usable = None
    meminfo = _meminfo(root / "proc/meminfo")
    return CpuMemoryFacts(
        logical_cpus=cpu_count(),
        usable_cpus=usable,
        cgroup_cpu_limit=_cgroup_cpu_limit(root),
        mem_total_bytes=meminfo.get("MemTotal"),
        mem_available_bytes=meminfo.get("MemAvailable"),
        cgroup_memory_limit_bytes=_cgroup_memory_limit(root),
    )


def _own_affinity() -> set[int]:
    """CPUs this process may run on."""
    return os.sched_getaffinity(0)


def cpu_list(text: str) -> set[int]:
    """``0-3,8,10-11`` (the kernel's cpu list format) as a set; empty for anything else."""
    found: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return set()
        found.update(range(int(low), int(high or low) + 1))
    return found


def online_cpus(root: Path) -> int | None:
    """Logical CPUs online (``/sys/devices/system/cpu/online``), None when unreadable."""
    return len(cpu_list(_read(root / "sys/devices/system/cpu/online") or "")) or None


def allowed_cpus(root: Path) -> set[int]:
    """CPUs this process may run on (``Cpus_allowed_list`` of ``/proc/self/status``); OSError when unknown."""
    for line in (_read(root / "proc/self/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return cpu_list(line.split(":", 1)[1])
    raise OSError("no Cpus_allowed_list in /proc/self/status")


WRITE_TEST_BYTES = 1 << 20


def _write_test(directory: Path) -> tuple[bool, str | None]:
    """Write 1 MiB of real bytes and ``fsync`` them, then remove the file: the only test that sees
    read-only mounts, quotas and a full disk (delayed allocation accepts a ``write`` and fails at the
    sync, so a write that is never synced proves nothing)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".preflight-write-test-") as handle:
            handle.write(os.urandom(WRITE_TEST_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        return False, f"cannot write {WRITE_TEST_BYTES >> 20} MiB in {directory}: {exc.strerror or exc}"
    return True, None


def _limit(value: int) -> int | None:
    """``RLIM_INFINITY`` -> None."""
    return None if value == resource.RLIM_INFINITY or value < 0 else value


def _read(path: Path) -> str | None:
    """File text, or None when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _meminfo(path: Path) -> dict[str, int]:
    """``/proc/meminfo`` as bytes per key (``MemTotal: 24684084 kB``)."""
    found: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            scale = 1024 if fields[1:2] == ["kB"] else 1
            found[key.strip()] = int(fields[0]) * scale
    return found


def _cgroup_memory_limit(root: Path) -> int | None:
    """cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes``; None when unlimited or absent."""
    for relative in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (_read(root / relative) or "").strip()
        if text.isdigit():
            value = int(text)
            return value if value < UNLIMITED_CGROUP else None
    return None


def _cgroup_cpu_limit(root: Path) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, v1 ``cfs_quota_us``); None when unlimited."""
    v2 = (_read(root / "sys/fs/cgroup/cpu.max") or "").split()
    if len(v2) == 2 and v2[0].isdigit() and v2[1].isdigit() and int(v2[1]) > 0:
        return int(v2[0]) / int(v2[1])
    quota = (_read(root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us") or "").strip()
    period = (_read(root / "sys/fs/cgroup/cpu/cpu.cfs_period_us") or "").strip()
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        return int(quota) / int(period)
    return None
