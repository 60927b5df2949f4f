"""Test-only pytest plugin (``-p tests.fakes.fake_host``): the host checks see a made-up machine, through
the run's transports only (never by replacing a fixture). It never ships.

``PREFLIGHT_FAKE_HOST`` names the machine: ``healthy-8xh100`` (bare metal, tmux, everything right) or
``troubled-docker`` (a container with every host problem at once). Each is:

- a filesystem root laid out as the kernel lays out ``/proc`` and ``/sys`` (proc(5): ``meminfo``,
  ``self/limits`` "Max locked memory", ``self/status`` "Cpus_allowed_list", ``<pid>/stat`` with the
  parent in field 4 and the tty in field 7, ``<pid>/cmdline`` NUL-separated, ``<pid>/fd/N`` links to
  ``socket:[inode]``, ``net/tcp`` rows with state 0A = LISTEN and the inode in field 10, ``cmdline``;
  sysfs ``devices/system/cpu/online``, ``class/infiniband``, ``kernel/iommu_groups``, the GPUs on the
  PCI bus), with ``/.dockerenv`` in the container;
- the ``statvfs`` of that filesystem (``/dev/shm`` 64 MiB in the container: docker's default ``--shm-size``);
- an environment, and a command runner that answers ``lspci -vvv`` with a real capture
  (tests/data/host/lspci-vvv-amd-gpp-acs-redirect-plx-acs-off.txt) or as a missing ``lspci``, and the
  torch probe as a CUDA torch counting the fake GPUs;
- the fake NVML C library (tests/fakes/nvml.py) of an 8x H100 SXM node, GPU 3 holding 70 GiB in the
  container with no process visible (smi/1xH100-k8s-pod-...: memory held from another pid namespace).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from preflight.node.transports import Transports
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, CommandRunner
from tests.fakes.fake_torch import cuda_answer, torch_runner
from tests.fakes.nvml import fake_transport, spec_for
from tests.fakes.nvml_plugin import sysfs_root

MiB, GiB, GB = 2**20, 2**30, 10**9
LSPCI = Path(__file__).resolve().parent.parent / "data" / "host" / "lspci-vvv-amd-gpp-acs-redirect-plx-acs-off.txt"
TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
LISTEN_29500 = "   0: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4711 1\n"
ROOT_KEY = pytest.StashKey[Path]()


@dataclass(frozen=True)
class Process:
    """One entry of the fake ``/proc``."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...] = ()
    tty: int = 0
    sockets: tuple[int, ...] = ()  # socket inodes it holds open


@dataclass(frozen=True)
class Machine:
    """A made-up host: what its files, mounts, environment and commands say."""

    environ: Mapping[str, str]
    cpus: int
    mem_total: int
    mem_available: int
    shm: tuple[int, int]  # total, free bytes of /dev/shm
    disk: tuple[int, int]  # total, free bytes of every other mount
    memlock: str  # "unlimited" or bytes
    rdma: tuple[str, ...]
    cmdline: str
    iommu_groups: int
    parents: tuple[Process, ...]  # our parent first, up to init
    others: tuple[Process, ...] = ()
    docker: bool = False
    tcp: str = TCP_HEADER
    lspci: bool = False
    nvml_faults: Mapping[str, object] = field(default_factory=dict)


MACHINES = {
    "healthy-8xh100": Machine(
        environ={"OMP_NUM_THREADS": "24", "NCCL_DEBUG": "WARN", "TMUX": "/tmp/tmux-1000/default,77,0",
                 "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22"},
        cpus=192, mem_total=2048 * GiB, mem_available=2000 * GiB, shm=(1024 * GiB, 1024 * GiB),
        disk=(30_000 * GB, 10_000 * GB), memlock="unlimited", rdma=("mlx5_0", "mlx5_1"),
        cmdline="BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt", iommu_groups=120,
        parents=(Process(70, 60, "bash", ("bash",), tty=34816), Process(60, 1, "tmux: server", ("tmux",)),
                 Process(1, 0, "systemd", ("/sbin/init",))),
    ),
    "troubled-docker": Machine(
        environ={"CUDA_LAUNCH_BLOCKING": "1", "NCCL_DEBUG": "INFO", "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22"},
        cpus=8, mem_total=32 * GiB, mem_available=30 * GiB, shm=(64 * MiB, 64 * MiB), disk=(100 * GB, 50 * GB),
        memlock="65536", rdma=("mlx5_0",), cmdline="BOOT_IMAGE=/vmlinuz amd_iommu=on", iommu_groups=60,
        parents=(Process(70, 60, "bash", ("bash",), tty=34816), Process(60, 1, "sshd", ("sshd: bob",)),
                 Process(1, 0, "tini", ("/tini",))),
        others=(Process(4242, 1, "torchrun", ("/usr/bin/python3", "/usr/local/bin/torchrun", "train.py"),
                        sockets=(4711,)),),
        docker=True, tcp=TCP_HEADER + LISTEN_29500, lspci=True, nvml_faults={"memory_used_mib": {"3": 70 * 1024}},
    ),
}


def machine(name: str | None = None) -> Machine:
    """The machine ``PREFLIGHT_FAKE_HOST`` names (default healthy-8xh100)."""
    chosen = name or os.environ.get("PREFLIGHT_FAKE_HOST", "healthy-8xh100")
    if chosen not in MACHINES:
        raise pytest.UsageError(f"PREFLIGHT_FAKE_HOST={chosen!r}: expected one of {', '.join(MACHINES)}")
    return MACHINES[chosen]


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _process(root: Path, proc: Process) -> None:
    base = f"proc/{proc.pid}"
    _write(root, f"{base}/stat", f"{proc.pid} ({proc.name}) S {proc.ppid} {proc.pid} {proc.pid} {proc.tty} -1 4194560\n")
    _write(root, f"{base}/cmdline", "".join(f"{arg}\0" for arg in proc.cmdline))
    _write(root, f"{base}/status", f"Name:\t{proc.name}\nUid:\t64123\t64123\t64123\t64123\n")
    (root / base / "fd").mkdir(exist_ok=True)
    for n, inode in enumerate(proc.sockets, start=3):
        (root / base / "fd" / str(n)).symlink_to(f"socket:[{inode}]")


def lay_out(spec: Machine, root: Path) -> Path:
    """The machine's ``/proc`` and ``/sys`` under ``root``."""
    me = Process(os.getpid(), spec.parents[0].pid, "python3", ("python3", "-m", "pytest"), tty=spec.parents[0].tty)
    for proc in (me, *spec.parents, *spec.others):
        _process(root, proc)
    _write(root, "proc/meminfo", f"MemTotal: {spec.mem_total // 1024} kB\nMemAvailable: {spec.mem_available // 1024} kB\n")
    _write(root, "proc/self/limits", f"Max locked memory         {spec.memlock}         {spec.memlock}         bytes\n")
    _write(root, "proc/self/status", f"Name:\tpython3\nCpus_allowed_list:\t0-{spec.cpus - 1}\n")
    _write(root, "sys/devices/system/cpu/online", f"0-{spec.cpus - 1}\n")
    _write(root, "proc/cmdline", spec.cmdline + "\n")
    _write(root, "proc/net/tcp", spec.tcp)
    _write(root, "proc/1/cgroup", "0::/docker/4f3c\n" if spec.docker else "0::/init.scope\n")
    for device in spec.rdma:
        (root / "sys/class/infiniband" / device).mkdir(parents=True, exist_ok=True)
    for group in range(spec.iommu_groups):
        (root / "sys/kernel/iommu_groups" / str(group)).mkdir(parents=True, exist_ok=True)
    (root / "dev/shm").mkdir(parents=True, exist_ok=True)
    if spec.docker:
        _write(root, ".dockerenv", "")
    return sysfs_root(spec_for("8x-h100-sxm"), root)


def statvfs_of(spec: Machine, root: Path) -> object:
    """``os.statvfs`` of the machine's mounts: /dev/shm under ``root`` and one disk for everything else."""

    def statvfs(path: str) -> os.statvfs_result:
        total, free = spec.shm if Path(path) == root / "dev/shm" else spec.disk
        block = 4096
        return os.statvfs_result((block, block, total // block, free // block, free // block, 0, 0, 0, 0, 255))

    return statvfs


def runner(spec: Machine, passthrough: CommandRunner) -> CommandRunner:
    """``lspci -vvv`` answered from a real capture (or as not installed); everything else passed on."""

    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if list(argv[:1]) == ["lspci"]:
            if not spec.lspci:
                return CommandResult(tuple(argv), None, "", "", not_found=True)
            return CommandResult(tuple(argv), 0, LSPCI.read_text(), "")
        return passthrough(argv, timeout_s, env)

    return run


def pytest_preflight_transports(config: pytest.Config) -> Transports:
    spec = machine()
    root = config.stash[ROOT_KEY] = lay_out(spec, Path(tempfile.mkdtemp(prefix="preflight-fake-host-")))
    faults: dict[str, Any] = dict(spec.nvml_faults)
    nvml = fake_transport("8x-h100-sxm", **faults)
    return Transports(nvml=nvml, run=runner(spec, torch_runner(cuda_answer(8))), environ=dict(spec.environ),
                      root=root, statvfs=statvfs_of(spec, root))  # type: ignore[arg-type]  # a statvfs-shaped fake


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(ROOT_KEY, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
