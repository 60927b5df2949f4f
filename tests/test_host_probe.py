"""Host probes against fake /proc, /sys, /dev/shm, process tables and command runners."""

from __future__ import annotations

import os
import resource
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from preflight.node.environment import JobEnvironment
from preflight.node.host import HostFacts
from preflight.node.transports import Transports
from preflight.parse.lspci_acs import LspciError, parse_lspci_acs
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult
from preflight.probe.host import (
    probe_container,
    probe_cpu_memory,
    probe_disk,
    probe_memlock,
    probe_shm,
)
from preflight.probe.host_pcie import kernel_parameters, probe_pcie
from preflight.probe.host_processes import (
    ProcessInfo,
    ancestors,
    classify,
    descendants,
    list_processes,
    probe_port,
    training_processes,
)
from preflight.probe.host_session import SessionFacts, probe_session

MiB = 2**20
DATA = Path(__file__).resolve().parent / "data" / "host"


def fake_statvfs(total: int, free: int, block: int = 4096):  # type: ignore[no-untyped-def]
    def statvfs(path: str) -> os.statvfs_result:
        return os.statvfs_result((block, block, total // block, free // block, free // block, 0, 0, 0, 0, 255))

    return statvfs


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- /dev/shm ---------------------------------------------------------------------------------

def test_shm_docker_default_64mib() -> None:
    facts = probe_shm("/dev/shm", fake_statvfs(64 * MiB, 60 * MiB))
    assert (facts.total_bytes, facts.free_bytes, facts.problem) == (64 * MiB, 60 * MiB, None)


def test_shm_missing_is_a_value() -> None:
    def missing(path: str) -> os.statvfs_result:
        raise FileNotFoundError(2, "No such file or directory", path)

    facts = probe_shm("/dev/shm", missing)
    assert facts.total_bytes is None and facts.problem == "/dev/shm does not exist"


def test_shm_real_mount_on_this_machine() -> None:
    facts = probe_shm()
    if not Path("/dev/shm").exists():
        assert facts.problem
    else:
        assert facts.total_bytes is not None and facts.free_bytes is not None
        assert 0 <= facts.free_bytes <= facts.total_bytes


# --- container ---------------------------------------------------------------------------------

def test_container_docker_by_dockerenv(tmp_path: Path) -> None:
    write(tmp_path, ".dockerenv", "")
    facts = probe_container(tmp_path, env={})
    assert facts.in_container and facts.kind == "docker"
    assert facts.evidence == ("/.dockerenv exists",)


def test_container_podman_by_containerenv(tmp_path: Path) -> None:
    write(tmp_path, "run/.containerenv", 'engine="podman-4.9.3"\n')
    facts = probe_container(tmp_path, env={"container": "podman"})
    assert facts.kind == "podman"
    assert "container=podman" in facts.evidence


def test_container_kubernetes_wins_over_runtime(tmp_path: Path) -> None:
    write(tmp_path, "proc/1/cgroup", "12:memory:/kubepods/burstable/pod1234/abcd\n0::/\n")
    facts = probe_container(tmp_path, env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert facts.kind == "kubernetes"
    assert "/proc/1/cgroup: 12:memory:/kubepods/burstable/pod1234/abcd" in facts.evidence


def test_container_by_cgroup_v1_docker(tmp_path: Path) -> None:
    write(tmp_path, "proc/1/cgroup", "11:cpuset:/docker/3f2a\n10:memory:/docker/3f2a\n")
    assert probe_container(tmp_path, env={}).kind == "docker"


def test_bare_metal(tmp_path: Path) -> None:
    write(tmp_path, "proc/1/cgroup", "0::/init.scope\n")
    facts = probe_container(tmp_path, env={})
    assert not facts.in_container and facts.kind is None and facts.evidence == ()


# --- memlock -----------------------------------------------------------------------------------

def test_memlock_values_and_rdma(tmp_path: Path) -> None:
    (tmp_path / "mlx5_0").mkdir()
    (tmp_path / "mlx5_1").mkdir()
    facts = probe_memlock(lambda which: (64 * 1024, 64 * 1024), tmp_path)
    assert facts.soft_bytes == 65536 and facts.hard_bytes == 65536
    assert facts.rdma_devices == ("mlx5_0", "mlx5_1")


def test_memlock_unlimited(tmp_path: Path) -> None:
    infinity = resource.RLIM_INFINITY
    facts = probe_memlock(lambda which: (infinity, infinity), tmp_path / "absent")
    assert facts.soft_bytes is None and facts.hard_bytes is None and facts.rdma_devices == ()


def test_memlock_failure_is_a_value(tmp_path: Path) -> None:
    def refuse(which: int) -> tuple[int, int]:
        raise OSError("not permitted")

    assert "not permitted" in (probe_memlock(refuse, tmp_path).problem or "")


def test_memlock_real() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    facts = probe_memlock()
    assert facts.soft_bytes == (None if soft == resource.RLIM_INFINITY else soft)


# --- disk --------------------------------------------------------------------------------------

def test_disk_existing_dir_really_written(tmp_path: Path) -> None:
    facts = probe_disk(str(tmp_path), fake_statvfs(4096 * 10**8, 4096 * 10**7))
    assert facts.exists and facts.writable is True and facts.free_bytes == 4096 * 10**7
    assert list(tmp_path.iterdir()) == []  # the write test cleans up


def test_disk_missing_dir_checks_the_parent(tmp_path: Path) -> None:
    facts = probe_disk(str(tmp_path / "runs" / "exp1"))
    assert not facts.exists and facts.checked_path == str(tmp_path) and facts.writable is True
    assert not (tmp_path / "runs").exists()


def test_disk_file_is_not_a_directory(tmp_path: Path) -> None:
    target = write(tmp_path, "ckpt", "x")
    facts = probe_disk(str(target))
    assert facts.writable is False and "not a directory" in (facts.problem or "")


def test_disk_unwritable_via_injected_write_test(tmp_path: Path) -> None:
    facts = probe_disk(str(tmp_path), write_test=lambda path: (False, f"cannot write in {path}: Read-only file system"))
    assert facts.writable is False and "Read-only" in (facts.problem or "")


# --- CPU and RAM -------------------------------------------------------------------------------

MEMINFO = "MemTotal:       24684084 kB\nMemFree:        24453924 kB\nMemAvailable:   24392324 kB\n"


def test_cpu_memory_without_cgroup_limits(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", MEMINFO)
    write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
    write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n")
    facts = probe_cpu_memory(tmp_path, cpu_count=lambda: 2, affinity=lambda: {0, 1})
    assert facts.mem_total_bytes == 24684084 * 1024
    assert facts.cgroup_memory_limit_bytes is None and facts.cgroup_cpu_limit is None
    assert facts.effective_cpus == 2 and facts.effective_memory_bytes == 24684084 * 1024


def test_cpu_memory_cgroup_v2_limits(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", MEMINFO)
    write(tmp_path, "sys/fs/cgroup/memory.max", str(8 * 2**30))
    write(tmp_path, "sys/fs/cgroup/cpu.max", "400000 100000\n")
    facts = probe_cpu_memory(tmp_path, cpu_count=lambda: 96, affinity=lambda: set(range(96)))
    assert facts.cgroup_cpu_limit == 4.0 and facts.effective_cpus == 4
    assert facts.effective_memory_bytes == 8 * 2**30


def test_cpu_memory_v2_max_means_unlimited(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", MEMINFO)
    write(tmp_path, "sys/fs/cgroup/memory.max", "max\n")
    write(tmp_path, "sys/fs/cgroup/cpu.max", "max 100000\n")
    facts = probe_cpu_memory(tmp_path, cpu_count=lambda: 8, affinity=lambda: {0, 1, 2})
    assert facts.cgroup_memory_limit_bytes is None and facts.cgroup_cpu_limit is None
    assert facts.effective_cpus == 3  # the affinity mask, not the machine


def test_cpu_memory_unreadable_proc(tmp_path: Path) -> None:
    facts = probe_cpu_memory(tmp_path, cpu_count=lambda: None, affinity=lambda: set())
    assert facts.effective_cpus is None and facts.effective_memory_bytes is None


def test_cpu_memory_real() -> None:
    facts = probe_cpu_memory()
    assert facts.effective_cpus == min(len(os.sched_getaffinity(0)), facts.effective_cpus or 10**9)
    assert facts.effective_memory_bytes and facts.effective_memory_bytes > 0


# --- processes ---------------------------------------------------------------------------------

def proc(pid: int, ppid: int, *argv: str, name: str | None = None, user: str = "alice") -> ProcessInfo:
    return ProcessInfo(pid, ppid, name or os.path.basename(argv[0]), tuple(argv), user)


TABLE = [
    proc(1, 0, "/sbin/init", name="systemd"),
    proc(900, 1, "sshd: alice@pts/0", name="sshd"),
    proc(1000, 900, "-bash", name="bash"),
    proc(1100, 1000, "/usr/bin/python3", "-m", "preflight", name="python3"),
    proc(1101, 1100, "/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "-m", "preflight.workers.ddp",
         name="python3"),
    proc(2000, 1, "/usr/bin/python3", "/home/bob/.local/bin/torchrun", "--nproc-per-node=8", "train.py", name="python3"),
    proc(2001, 2000, "/usr/bin/python3", "-u", "train.py", "--lr", "3e-4", name="python3"),
    proc(2100, 1, "/opt/conda/bin/deepspeed", "--num_gpus", "8", "pretrain_gpt.py"),
    proc(2200, 1, "/usr/local/bin/accelerate", "launch", "finetune_llama.py"),
    proc(2201, 1, "/usr/local/bin/accelerate", "config"),
    proc(2300, 1, "./build/all_reduce_perf", "-b", "8", "-e", "8G"),
    proc(2400, 1, "/usr/bin/python3", "-m", "http.server", name="python3"),
    proc(2500, 1, "/usr/bin/python3", "scripts/sft_run.py", name="python3"),
    proc(2600, 1, "torchrun", "--nproc-per-node=2", "x.py"),
    proc(2700, 1, name="kworker/0:1"),
]


@pytest.mark.parametrize(
    ("pid", "reason"),
    [
        (2000, "python -m torch.distributed.run"),
        (2001, "python training script train.py"),
        (2100, "deepspeed launcher"),
        (2200, "accelerate launcher"),
        (2201, None),
        (2300, "nccl-tests benchmark"),
        (2400, None),
        (2500, "python training script sft_run.py"),
        (2600, "torchrun launcher"),
        (2700, None),
        (1000, None),
    ],
)
def test_classify(pid: int, reason: str | None) -> None:
    by_pid = {p.pid: p for p in TABLE}
    found = classify(by_pid[pid])
    if reason == "python -m torch.distributed.run":
        assert found is None  # torchrun installed as a script run by python: caught by its script name
        assert classify(proc(1, 0, "/home/bob/.local/bin/torchrun", "train.py")) == "torchrun launcher"
    else:
        assert found == reason


def test_training_processes_exclude_ourselves_parents_and_children() -> None:
    found = {t.process.pid for t in training_processes(TABLE, own_pid=1100)}
    assert 1101 not in found and 1100 not in found
    assert found == {2001, 2100, 2200, 2300, 2500, 2600}


def test_ancestors_and_descendants() -> None:
    assert [p.pid for p in ancestors(1101, TABLE)] == [1100, 1000, 900, 1]
    assert descendants(2000, TABLE) == {2001}
    assert descendants(1, TABLE) >= {900, 1000, 1100, 1101, 2000, 2001}


def test_ancestors_survive_a_cycle() -> None:
    table = [proc(5, 6, "a"), proc(6, 5, "b")]
    assert [p.pid for p in ancestors(5, table)] == [6]


def test_list_processes_real_includes_ourselves() -> None:
    table = list_processes()
    me = next(p for p in table if p.pid == os.getpid())
    assert me.ppid == os.getppid()
    assert {p.pid for p in ancestors(os.getpid(), table)} >= {os.getppid()}


# --- rendezvous port -------------------------------------------------------------------------

TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
LISTEN_29500 = "   0: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4711 1\n"
ESTABLISHED_29500 = "   1: 0100007F:733C 0100007F:A0B2 01 00000000:00000000 00:00000000 00000000  1000        0 4712 1\n"
LISTEN_2024 = "   2: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1526 1\n"


def test_port_listener_found_with_owner(tmp_path: Path) -> None:
    write(tmp_path, "tcp", TCP_HEADER + LISTEN_29500 + LISTEN_2024)
    conns = [SimpleNamespace(status="LISTEN", laddr=SimpleNamespace(port=29500), pid=4242),
             SimpleNamespace(status="ESTABLISHED", laddr=SimpleNamespace(port=29500), pid=1)]
    facts = probe_port(29500, tmp_path, connections=lambda: conns)
    assert facts.state == "listening" and facts.pids == (4242,)
    assert "00000000:733C" in facts.evidence


def test_port_owner_hidden_without_root(tmp_path: Path) -> None:
    write(tmp_path, "tcp6", TCP_HEADER + LISTEN_29500)

    def denied() -> list[object]:
        import psutil

        raise psutil.AccessDenied()

    facts = probe_port(29500, tmp_path, connections=denied)
    assert facts.state == "listening" and facts.pids == ()


def test_port_free_when_only_other_ports_or_connections(tmp_path: Path) -> None:
    write(tmp_path, "tcp", TCP_HEADER + ESTABLISHED_29500 + LISTEN_2024)
    assert probe_port(29500, tmp_path, connections=list).state == "free"


def test_port_unknown_when_proc_net_unreadable(tmp_path: Path) -> None:
    facts = probe_port(29500, tmp_path / "absent", connections=list)
    assert facts.state == "unknown" and "could not be read" in facts.evidence


def test_port_real_listener_is_seen(tmp_path: Path) -> None:
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        facts = probe_port(port)
    assert facts.state == "listening"
    assert facts.pids in ((), (os.getpid(),))


# --- session -----------------------------------------------------------------------------------

def session_table(*names: str) -> list[ProcessInfo]:
    """A chain init <- names[0] <- ... <- our process (pid 100)."""
    table = [proc(1, 0, "/sbin/init", name="systemd")]
    parent = 1
    for offset, name in enumerate(names):
        table.append(proc(10 + offset, parent, name, name=name))
        parent = 10 + offset
    table.append(proc(100, parent, "python3", name="python3"))
    return table


def stat_root(tmp_path: Path, tty_nr: int) -> Path:
    write(tmp_path, "100/stat", f"100 (python3 (x)) S 99 100 100 {tty_nr} 100 4194304 0 0 0 0\n")
    return tmp_path


def session(tmp_path: Path, env: Mapping[str, str], names: Sequence[str], tty_nr: int = 34816,
            sighup: object = signal.SIG_DFL) -> SessionFacts:
    return probe_session(env=env, processes=lambda: session_table(*names), own_pid=100,
                         sighup_handler=lambda: sighup, proc_root=stat_root(tmp_path, tty_nr))


def test_bare_ssh_session(tmp_path: Path) -> None:
    facts = session(tmp_path, {"SSH_CONNECTION": "203.0.113.5 50000 10.0.0.2 22", "SSH_TTY": "/dev/pts/0"},
                    ["sshd", "sshd", "bash"])
    assert facts.over_ssh and facts.controlling_tty is True and not facts.sighup_ignored
    assert facts.keepers() == []
    assert [p.name for p in facts.parents] == ["bash", "sshd", "sshd", "systemd"]


def test_tmux_inside_ssh(tmp_path: Path) -> None:
    facts = session(tmp_path, {"SSH_CONNECTION": "x", "TMUX": "/tmp/tmux-1000/default,1234,0"}, ["tmux: server", "bash"])
    assert facts.over_ssh
    assert facts.keepers() == ["tmux (TMUX is set)"]


def test_screen_found_from_parent_chain_alone(tmp_path: Path) -> None:
    facts = session(tmp_path, {}, ["sshd", "SCREEN", "bash"])
    assert facts.over_ssh  # sshd among the parents
    assert facts.keepers() == ["screen (parent process 11 SCREEN)"]


def test_nohup_and_no_tty(tmp_path: Path) -> None:
    facts = session(tmp_path, {"SSH_CLIENT": "x"}, ["sshd", "bash"], tty_nr=0, sighup=signal.SIG_IGN)
    assert facts.sighup_ignored and facts.controlling_tty is False
    assert facts.keepers() == ["SIGHUP is ignored (nohup)", "no controlling terminal (setsid, cron or a service)"]


def test_slurm_kubernetes_systemd(tmp_path: Path) -> None:
    facts = session(tmp_path, {"SLURM_JOB_ID": "42", "KUBERNETES_SERVICE_HOST": "10.0.0.1", "INVOCATION_ID": "ab"}, [])
    assert facts.keepers() == ["slurm job (SLURM_JOB_ID is set)", "kubernetes pod (KUBERNETES_SERVICE_HOST is set)",
                               "systemd unit (INVOCATION_ID is set)"]
    assert "SSH_CONNECTION" not in facts.variables


def test_session_process_table_failure_is_tolerated(tmp_path: Path) -> None:
    def broken() -> list[ProcessInfo]:
        raise PermissionError("no /proc")

    facts = probe_session(env={"SSH_TTY": "/dev/pts/1"}, processes=broken, own_pid=100,
                          sighup_handler=lambda: signal.SIG_DFL, proc_root=tmp_path / "absent")
    assert facts.parents == () and facts.controlling_tty is None and facts.over_ssh


def test_session_real_process() -> None:
    facts = probe_session(dict(os.environ))
    assert facts.parents and facts.parents[0].pid == os.getppid()
    expected = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert facts.sighup_ignored is expected


# --- IOMMU / ACS -------------------------------------------------------------------------------

def recorded(stdout: str = "", returncode: int | None = 0, not_found: bool = False, timed_out: bool = False):  # type: ignore[no-untyped-def]
    calls: list[tuple[tuple[str, ...], float]] = []

    def runner(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None) -> CommandResult:
        calls.append((tuple(argv), timeout_s))
        return CommandResult(tuple(argv), returncode, stdout, "", timed_out=timed_out, not_found=not_found)

    runner.calls = calls  # type: ignore[attr-defined]
    return runner


def test_lspci_acs_redirect_on_amd_bridge_not_on_switch() -> None:
    report = parse_lspci_acs((DATA / "lspci-vvv-amd-gpp-acs-redirect-plx-acs-off.txt").read_text())
    assert report.devices == 4 and report.access_denied == 0
    assert [c.address for c in report.controls] == ["40:01.1", "44:00.0"]
    assert [c.address for c in report.redirecting] == ["40:01.1"]
    assert report.controls[0].flags["SrcValid"] and not report.controls[0].flags["TransBlk"]


def test_lspci_without_root() -> None:
    report = parse_lspci_acs((DATA / "lspci-vvv-vm-not-root-access-denied.txt").read_text())
    assert report.devices == 3 and report.access_denied == 2 and report.controls == ()


@pytest.mark.parametrize("text", ["hello world\n", "\t\tACSCtl:\tSrcValid+\n", "00:01.0 PCI bridge: x\n\t\tACSCtl: nothing\n"])
def test_lspci_garbage_raises(text: str) -> None:
    with pytest.raises(LspciError):
        parse_lspci_acs(text)


def test_kernel_parameters_stop_at_double_dash() -> None:
    params = kernel_parameters("BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt pci=noacs quiet -- iommu=off")
    assert params == {"intel_iommu": "on", "iommu": "pt", "pci": "noacs"}


def test_pcie_probe_with_lspci(tmp_path: Path) -> None:
    write(tmp_path, "proc/cmdline", "BOOT_IMAGE=/vmlinuz amd_iommu=on\n")
    for group in ("0", "1", "2"):
        (tmp_path / "sys/kernel/iommu_groups" / group).mkdir(parents=True)
    runner = recorded((DATA / "lspci-vvv-amd-gpp-acs-redirect-plx-acs-off.txt").read_text())
    facts = probe_pcie(tmp_path, runner=runner, timeout_s=3)
    assert runner.calls == [(("lspci", "-vvv"), 3)]
    assert facts.iommu_groups == 3 and facts.iommu_mode == "translated"
    assert facts.acs is not None and len(facts.acs.redirecting) == 1
    assert "40:01.1" in facts.lspci_excerpt and facts.lspci_problem is None


@pytest.mark.parametrize(
    ("runner", "problem"),
    [
        (recorded(not_found=True, returncode=None), "not found on PATH"),
        (recorded(timed_out=True, returncode=None), "no answer"),
        (recorded((DATA / "lspci-vvv-vm-not-root-access-denied.txt").read_text()), "run as root"),
        (recorded("not lspci output\n"), "not understood"),
    ],
)
def test_pcie_probe_lspci_problems_are_values(tmp_path: Path, runner, problem: str) -> None:  # type: ignore[no-untyped-def]
    facts = probe_pcie(tmp_path, runner=runner)
    assert facts.cmdline is None and facts.iommu_groups is None and facts.iommu_mode == "unknown"
    assert problem in (facts.lspci_problem or "")


def test_pcie_probe_passthrough_and_off(tmp_path: Path) -> None:
    write(tmp_path, "proc/cmdline", "intel_iommu=on iommu=pt\n")
    assert probe_pcie(tmp_path, runner=recorded(not_found=True)).iommu_mode == "passthrough"
    write(tmp_path, "proc/cmdline", "quiet\n")
    (tmp_path / "sys/kernel/iommu_groups").mkdir(parents=True)
    assert probe_pcie(tmp_path, runner=recorded(not_found=True)).iommu_mode == "off"


def test_the_hostname_is_the_transports_and_the_real_one_is_gethostname(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('PRETTY_NAME="Fake Linux 1"\n')
    host = HostFacts(Transports(root=tmp_path, hostname=lambda: "gpu-node-7"), JobEnvironment())
    assert (host.identity.hostname, host.identity.os) == ("gpu-node-7", "Fake Linux 1")
    assert Transports().hostname() == socket.gethostname()
