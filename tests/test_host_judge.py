"""Every verdict of the host judges, from hand-built facts."""

from __future__ import annotations

import pytest

from preflight.judge.host import (
    judge_checkpoint_disk,
    judge_cpu_memory,
    judge_memlock,
    judge_shm,
)
from preflight.judge.host_session import (
    default_port_user,
    env_findings,
    judge_environment,
    judge_leftover_processes,
    judge_pcie_evidence,
    judge_rendezvous_port,
    judge_session,
    pcie_evidence,
)
from preflight.outcome import Status
from preflight.parse.launch_command import parse_launch_command
from preflight.parse.lspci_acs import AcsControl, AcsReport
from preflight.probe.host import ContainerFacts, CpuMemoryFacts, DiskFacts, MemlockFacts, ShmFacts
from preflight.probe.host_pcie import PcieFacts
from preflight.probe.host_processes import PortFacts, ProcessInfo, TrainingProcess
from preflight.probe.host_session import SessionFacts

MiB, GiB, GB = 2**20, 2**30, 10**9
BARE = ContainerFacts(False, None, ())
DOCKER = ContainerFacts(True, "docker", ("/.dockerenv exists",))
K8S = ContainerFacts(True, "kubernetes", ("KUBERNETES_SERVICE_HOST is set",))


# --- /dev/shm ---------------------------------------------------------------------------------

def test_shm_docker_default_warns_with_docker_fix() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", 64 * MiB, 64 * MiB), DOCKER)
    assert (verdict.status, verdict.code) == (Status.WARN, "SHM_SMALL")
    assert "64 MiB" in verdict.summary
    assert verdict.remediation and "--ipc=host" in verdict.remediation and "--shm-size" in verdict.remediation


def test_shm_small_on_kubernetes_says_emptydir() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", 64 * MiB, 64 * MiB), K8S)
    assert verdict.remediation and "emptyDir" in verdict.remediation


def test_shm_small_on_bare_metal_says_remount() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", 256 * MiB, 256 * MiB), BARE)
    assert verdict.remediation and "remount" in verdict.remediation


def test_shm_below_the_jobs_need_fails() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", 1 * GiB, 1 * GiB), DOCKER, required_bytes=2 * GiB)
    assert (verdict.status, verdict.code) == (Status.FAIL, "SHM_TOO_SMALL")
    assert "2.0 GiB" in verdict.summary


def test_shm_nearly_full_warns_about_leftovers() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", 16 * GiB, 100 * MiB), BARE)
    assert (verdict.status, verdict.code) == (Status.WARN, "SHM_FULL")
    assert verdict.remediation and "ls -la /dev/shm" in verdict.remediation


def test_shm_missing_fails() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", None, None, "/dev/shm does not exist"), BARE)
    assert (verdict.status, verdict.code) == (Status.FAIL, "SHM_UNAVAILABLE")


def test_shm_large_passes_with_metrics() -> None:
    verdict = judge_shm(ShmFacts("/dev/shm", 16 * GiB, 16 * GiB), DOCKER)
    assert verdict.status is Status.PASS and "inside docker" in verdict.summary
    assert {m.name for m in verdict.metrics} == {"shm_total_bytes", "shm_free_bytes"}


def test_shm_exactly_512_mib_passes() -> None:
    assert judge_shm(ShmFacts("/dev/shm", 512 * MiB, 512 * MiB), BARE).status is Status.PASS


# --- memlock -----------------------------------------------------------------------------------

def test_memlock_unlimited_passes() -> None:
    assert judge_memlock(MemlockFacts(None, None, ("mlx5_0",)), BARE).status is Status.PASS


def test_memlock_finite_without_rdma_passes_and_says_why() -> None:
    verdict = judge_memlock(MemlockFacts(8 * MiB, 8 * MiB, ()), DOCKER)
    assert verdict.status is Status.PASS
    assert "8,192 KiB" in verdict.summary and "no RDMA device" in verdict.summary


@pytest.mark.parametrize(
    ("hard", "container", "fix"),
    [(64 * 1024, DOCKER, "--ulimit memlock=-1"), (None, BARE, "ulimit -l unlimited"), (64 * 1024, BARE, "limits.conf")],
)
def test_memlock_low_with_rdma_warns(hard: int | None, container: ContainerFacts, fix: str) -> None:
    verdict = judge_memlock(MemlockFacts(64 * 1024, hard, ("mlx5_0", "mlx5_1")), container)
    assert (verdict.status, verdict.code) == (Status.WARN, "MEMLOCK_LOW")
    assert "64 KiB" in verdict.summary and "mlx5_0, mlx5_1" in verdict.summary
    assert verdict.remediation and fix in verdict.remediation


def test_memlock_unreadable_is_an_error() -> None:
    assert judge_memlock(MemlockFacts(None, None, (), "failed"), BARE).status is Status.ERROR


# --- checkpoint disk ---------------------------------------------------------------------------

def disk(free: int | None, writable: bool | None = True, exists: bool = True, problem: str | None = None) -> DiskFacts:
    return DiskFacts("/data/ckpt", exists, "/data/ckpt" if exists else "/data", free, 10**13, writable, problem)


def test_checkpoint_7b_needs_98_gb() -> None:
    need = 7 * GB * 14  # weights 2 + master 4 + optimizer 8
    assert judge_checkpoint_disk(disk(300 * GB), need).status is Status.PASS
    tight = judge_checkpoint_disk(disk(150 * GB), need)
    assert (tight.status, tight.code) == (Status.WARN, "CHECKPOINT_DISK_TIGHT")
    small = judge_checkpoint_disk(disk(84 * GB), need)
    assert (small.status, small.code) == (Status.FAIL, "CHECKPOINT_DISK_TOO_SMALL")
    assert "98.00 GB" in small.summary and "84.00 GB" in small.summary


def test_checkpoint_dir_not_writable_fails() -> None:
    verdict = judge_checkpoint_disk(disk(500 * GB, writable=False, problem="Read-only file system"))
    assert (verdict.status, verdict.code) == (Status.FAIL, "CHECKPOINT_DIR_NOT_WRITABLE")
    assert "Read-only" in verdict.summary


def test_checkpoint_dir_to_be_created() -> None:
    verdict = judge_checkpoint_disk(disk(500 * GB, exists=False))
    assert verdict.status is Status.PASS and "does not exist yet" in verdict.summary


def test_disk_low_without_model_warns() -> None:
    verdict = judge_checkpoint_disk(disk(2 * GB))
    assert (verdict.status, verdict.code) == (Status.WARN, "DISK_LOW")


def test_disk_unreadable_is_an_error() -> None:
    assert judge_checkpoint_disk(disk(None, writable=None, problem="statvfs failed")).status is Status.ERROR


# --- CPU and RAM per rank ----------------------------------------------------------------------

def cpu(cores: int, ram: int, cgroup_mem: int | None = None, quota: float | None = None) -> CpuMemoryFacts:
    return CpuMemoryFacts(cores, cores, quota, ram, ram, cgroup_mem)


def test_cpu_memory_per_rank_reported() -> None:
    verdict = judge_cpu_memory(cpu(192, 2048 * GiB), ranks=8)
    assert verdict.status is Status.PASS
    assert "24 cores and 256.0 GiB per rank" in verdict.summary


def test_cpu_memory_low_per_rank_warns() -> None:
    verdict = judge_cpu_memory(cpu(8, 32 * GiB), ranks=8)
    assert (verdict.status, verdict.code) == (Status.WARN, "HOST_RESOURCES_PER_RANK_LOW")
    assert "fewer than 2 cores and less than 8.0 GiB RAM" in verdict.summary


def test_cgroup_limits_count() -> None:
    verdict = judge_cpu_memory(cpu(96, 1024 * GiB, cgroup_mem=16 * GiB, quota=4.0), ranks=4)
    assert verdict.status is Status.WARN
    assert "cgroup memory limit 16.0 GiB" in verdict.summary and "cgroup CPU quota 4" in verdict.summary


def test_cpu_memory_unreadable_is_an_error() -> None:
    assert judge_cpu_memory(CpuMemoryFacts(None, None, None, None, None, None), ranks=1).status is Status.ERROR


# --- session -----------------------------------------------------------------------------------

def facts(variables: dict[str, str], names: tuple[str, ...] = (), tty: bool | None = True, hup: bool = False) -> SessionFacts:
    parents = tuple(ProcessInfo(10 + i, 11 + i, n, (n,)) for i, n in enumerate(names))
    return SessionFacts(variables, parents, hup, tty)


def test_bare_ssh_warns() -> None:
    verdict = judge_session(facts({"SSH_CONNECTION": "x"}, ("bash", "sshd")))
    assert (verdict.status, verdict.code) == (Status.WARN, "SESSION_NOT_DETACHED")
    assert verdict.remediation and "tmux" in verdict.remediation and "not restarted" in verdict.remediation
    assert "sshd(11)" in verdict.evidence["session"]


@pytest.mark.parametrize(
    "session",
    [
        facts({"SSH_CONNECTION": "x", "TMUX": "/tmp/t"}),
        facts({"SSH_CONNECTION": "x", "STY": "1234.pts-0"}),
        facts({"SSH_CONNECTION": "x"}, ("bash", "screen", "sshd")),
        facts({"SSH_CONNECTION": "x"}, hup=True),
        facts({"SSH_CONNECTION": "x"}, tty=False),
        facts({"SLURM_JOB_ID": "7"}),
    ],
)
def test_detached_sessions_pass(session: SessionFacts) -> None:
    verdict = judge_session(session)
    assert verdict.status is Status.PASS and "survives a disconnect" in verdict.summary


def test_local_terminal_passes() -> None:
    assert judge_session(facts({}, ("bash", "gnome-terminal"))).status is Status.PASS


# --- leftovers and port ------------------------------------------------------------------------

def test_no_leftovers_pass() -> None:
    assert judge_leftover_processes([]).status is Status.PASS


def test_leftovers_warn_with_pids() -> None:
    found = [TrainingProcess(ProcessInfo(2000, 1, "torchrun", ("torchrun", "train.py"), "bob"), "torchrun launcher")]
    verdict = judge_leftover_processes(found)
    assert (verdict.status, verdict.code) == (Status.WARN, "LEFTOVER_TRAINING_PROCESSES")
    assert "2000 torchrun launcher" in verdict.summary
    assert verdict.remediation and "kill 2000" in verdict.remediation
    assert "user bob" in verdict.evidence["processes"]


def test_port_states() -> None:
    assert judge_rendezvous_port(PortFacts(29500, "free")).status is Status.PASS
    assert judge_rendezvous_port(PortFacts(29500, "unknown", evidence="unreadable")).status is Status.SKIP
    taken = judge_rendezvous_port(PortFacts(29500, "listening", (4242,), "0: 00000000:733C ..."), "MASTER_PORT=29500 is set")
    assert (taken.status, taken.code) == (Status.WARN, "RENDEZVOUS_PORT_IN_USE")
    assert "pid 4242" in taken.summary and "MASTER_PORT=29500" in taken.summary
    assert taken.remediation and "--standalone" in taken.remediation
    hidden = judge_rendezvous_port(PortFacts(29500, "listening", (), "x"), "x")
    assert "run as root" in hidden.summary


def test_taken_port_is_a_note_for_a_standalone_job() -> None:
    verdict = judge_rendezvous_port(PortFacts(29500, "listening", (4242,), "x"), None)
    assert verdict.status is Status.PASS and verdict.code is None
    assert "--standalone picks a free port" in verdict.summary
    assert verdict.remediation and "DeepSpeed" in verdict.remediation


@pytest.mark.parametrize(
    ("env", "launch", "uses"),
    [
        ({}, None, False),  # the job preflight is for: torchrun --standalone
        ({"MASTER_PORT": "29500"}, None, True),
        ({"MASTER_PORT": "29501"}, None, False),
        ({}, "torchrun --standalone --nproc-per-node=gpu train.py", False),
        ({"MASTER_PORT": "29500"}, "torchrun --standalone --nproc-per-node=gpu train.py", False),
        ({}, "torchrun --nproc-per-node=8 train.py", True),
        ({}, "torchrun --nproc-per-node=8 --master-port=29600 train.py", False),
        ({}, "torchrun --nproc-per-node=8 --master_port 29500 train.py", True),
        ({}, "torchrun --nnodes=1 --rdzv-backend=c10d --rdzv-endpoint=localhost:29500 train.py", True),
        ({}, "torchrun --nnodes=1 --rdzv-backend=c10d --rdzv-endpoint=localhost:0 train.py", False),
        ({}, "deepspeed train.py --deepspeed_config ds.json", True),
        ({}, "deepspeed --master_port 29700 train.py", False),
        ({}, "MASTER_PORT=29500 python train.py", True),
    ],
)
def test_who_uses_the_default_port(env: dict[str, str], launch: str | None, uses: bool) -> None:
    user = default_port_user(29500, env, parse_launch_command(launch) if launch else None)
    assert (user is not None) is uses, user


# --- environment -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"CUDA_LAUNCH_BLOCKING": "1"}, "CUDA_LAUNCH_BLOCKING"),
        ({"NCCL_DEBUG": "INFO"}, "NCCL_DEBUG"),
        ({"NCCL_DEBUG": "trace"}, "NCCL_DEBUG"),
        ({"NCCL_P2P_DISABLE": "1"}, "NCCL_P2P_DISABLE"),
        ({"NCCL_P2P_LEVEL": "LOC"}, "NCCL_P2P_LEVEL"),
        ({"NCCL_SHM_DISABLE": "1"}, "NCCL_SHM_DISABLE"),
        ({"TORCH_NCCL_BLOCKING_WAIT": "1"}, "TORCH_NCCL_BLOCKING_WAIT"),
        ({"NCCL_BLOCKING_WAIT": "true"}, "NCCL_BLOCKING_WAIT"),
        ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, "PYTORCH_NO_CUDA_MEMORY_CACHING"),
        ({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, "TORCH_DISTRIBUTED_DEBUG"),
    ],
)
def test_each_bad_variable_warns(env: dict[str, str], variable: str) -> None:
    env = {"OMP_NUM_THREADS": "8", **env}
    verdict = judge_environment(env, ranks=8, cores_per_rank=24)
    assert (verdict.status, verdict.code) == (Status.WARN, "ENV_HYGIENE")
    assert verdict.details["variables"] == [variable]
    assert verdict.summary.startswith(variable)


@pytest.mark.parametrize(
    "env",
    [{"CUDA_LAUNCH_BLOCKING": "0"}, {"NCCL_DEBUG": "WARN"}, {"NCCL_P2P_DISABLE": "0"}, {"NCCL_P2P_LEVEL": "NVL"},
     {"TORCH_DISTRIBUTED_DEBUG": "OFF"}, {"NCCL_SHM_DISABLE": ""}],
)
def test_harmless_values_pass(env: dict[str, str]) -> None:
    assert judge_environment(env, ranks=1, cores_per_rank=2).status is Status.PASS


def test_omp_unset_with_many_cores_per_rank() -> None:
    found = env_findings({}, ranks=8, cores_per_rank=24)
    assert [f.variable for f in found] == ["OMP_NUM_THREADS"]
    assert found[0].fix == "export OMP_NUM_THREADS=24"


@pytest.mark.parametrize(("ranks", "cores"), [(1, 64), (8, 2), (8, None)])
def test_omp_unset_is_fine_with_one_rank_or_few_cores(ranks: int, cores: float | None) -> None:
    assert env_findings({}, ranks=ranks, cores_per_rank=cores) == []


def test_several_findings_in_one_verdict() -> None:
    verdict = judge_environment({"CUDA_LAUNCH_BLOCKING": "1", "NCCL_DEBUG": "INFO"}, ranks=8, cores_per_rank=24)
    assert verdict.details["variables"] == ["CUDA_LAUNCH_BLOCKING", "NCCL_DEBUG", "OMP_NUM_THREADS"]
    assert verdict.remediation == "unset CUDA_LAUNCH_BLOCKING; export NCCL_DEBUG=WARN; export OMP_NUM_THREADS=24"
    assert "NCCL_DEBUG=INFO" in verdict.evidence["environment"]


# --- IOMMU / ACS evidence ----------------------------------------------------------------------

def pcie(cmdline: str | None, groups: int | None, acs: AcsReport | None, problem: str | None = None) -> PcieFacts:
    from preflight.probe.host_pcie import kernel_parameters

    return PcieFacts(cmdline, kernel_parameters(cmdline or ""), groups, acs, problem, "")


def test_pcie_evidence_with_acs_redirect() -> None:
    control = AcsControl("40:01.1", "PCI bridge", {"SrcValid": True, "ReqRedir": True}, "ACSCtl: SrcValid+ ReqRedir+")
    verdict = judge_pcie_evidence(pcie("amd_iommu=on", 40, AcsReport(5, (control,), 0)))
    assert verdict.status is Status.PASS
    assert "IOMMU translated" in verdict.summary and "ACS redirect enabled on 1 of 1" in verdict.summary
    assert verdict.details["p2p_risk"] is True


def test_pcie_evidence_passthrough_without_lspci() -> None:
    verdict = judge_pcie_evidence(pcie("iommu=pt pci=noacs", 12, None, "lspci: not found on PATH"))
    assert verdict.status is Status.PASS and verdict.details["p2p_risk"] is False
    assert "pci=noacs" in verdict.summary and "not found" in verdict.summary


def test_pcie_nothing_readable_skips() -> None:
    assert judge_pcie_evidence(pcie(None, None, None, "lspci: not found on PATH")).status is Status.SKIP


def test_pcie_evidence_for_p2p_checks() -> None:
    control = AcsControl("40:01.1", "PCI bridge", {"ReqRedir": True}, "ACSCtl: ReqRedir+")
    facts = PcieFacts("amd_iommu=on pci=noacs", {"amd_iommu": "on", "pci": "noacs"}, 40, AcsReport(5, (control,), 0),
                      None, "40:01.1 PCI bridge\n    ACSCtl: ReqRedir+")
    evidence = pcie_evidence(facts)
    assert evidence["iommu"] == "mode translated; IOMMU kernel parameters: amd_iommu=on pci=noacs; IOMMU groups: 40"
    assert "ReqRedir+" in evidence["lspci ACSCtl"]
    assert pcie_evidence(pcie(None, None, None, "lspci: not found on PATH"))["lspci ACSCtl"] == "lspci: not found on PATH"
