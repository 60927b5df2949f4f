"""Will the node keep the job alive: the session, leftover runs, the rendezvous port, environment.

Also the IOMMU/ACS evidence, reported here and kept for the peer-to-peer checks to attach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from preflight.judge.job_environment import EVIDENCE_NAMES, JobEnvFinding, job_environment_findings
from preflight.probe.host import CpuMemoryFacts
from preflight.outcome import Metric, Verdict, passed, skip, warn
from preflight.parse.launch_command import LaunchCommand
from preflight.probe.host_pcie import PcieFacts
from preflight.probe.host_processes import PREFLIGHT_RUN, PortFacts, TrainingProcess
from preflight.probe.host_session import SessionFacts

OMP_WARN_CORES_PER_RANK = 4
"""torchrun pins OMP_NUM_THREADS=1 when unset; worth fixing from this many cores per rank."""

_FALSY = ("", "0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class EnvFinding:
    """One variable that slows or breaks a job, and why."""

    variable: str
    value: str | None
    why: str
    fix: str


def judge_session(session: SessionFacts) -> Verdict:
    """WARN in a bare SSH session: a dropped connection sends SIGHUP and kills the job."""
    keepers = session.keepers()
    chain = " <- ".join(f"{p.name}({p.pid})" for p in session.parents[:6])
    evidence = {"session": "\n".join(
        [f"variables set: {', '.join(sorted(session.variables)) or 'none'}",
         f"parent chain: {chain or 'unknown'}",
         f"SIGHUP ignored: {session.sighup_ignored}", f"controlling terminal: {session.controlling_tty}"])}
    if keepers:
        return passed(f"a job started from this shell survives a disconnect: {'; '.join(keepers)}", evidence=evidence)
    if session.over_ssh:
        return warn(
            "SESSION_NOT_DETACHED",
            "bare SSH session (no tmux, screen, nohup or scheduler): a dropped connection kills a job started here",
            "Start the job inside `tmux new -s train` (detach with Ctrl-b d, reattach with `tmux attach -t train`) "
            "or screen, or as `nohup torchrun ... > train.log 2>&1 &`. A lost VM is not restarted for you: "
            "checkpoint often and resume from the last one.",
            evidence=evidence,
        )
    return passed("not an SSH session and no sign of a terminal that could hang up", evidence=evidence)


def judge_leftover_processes(found: Sequence[TrainingProcess]) -> Verdict:
    """WARN when other training runs, launchers or nccl-tests are still running; another preflight run
    in progress is named as such (it will end by itself, and the two disturb each other's figures)."""
    others = [t for t in found if t.reason == PREFLIGHT_RUN]
    found = [t for t in found if t.reason != PREFLIGHT_RUN]
    if others and not found:
        pids = ", ".join(str(t.process.pid) for t in others[:5])
        return warn("PREFLIGHT_RUN_IN_PROGRESS", f"another preflight run is in progress (pid {pids}): its launches "
                    "and this run's compete for the GPUs and CPUs, so both runs' figures are disturbed",
                    "Let the other run finish (it stops by itself within its --timeout), then run preflight again; "
                    "give concurrent runs their own --report-dir and never run two on one node at once.",
                    evidence={"processes": "\n".join(f"pid {t.process.pid}: {t.process.command()[:200]}"
                                                     for t in others)})
    if not found:
        return passed("no other training processes (torchrun, deepspeed, accelerate, train scripts, nccl-tests)")
    lines = [f"pid {t.process.pid} ({t.reason}, user {t.process.username or '?'}): {t.process.command()[:200]}"
             for t in found]
    pids = " ".join(str(t.process.pid) for t in found)
    return warn(
        "LEFTOVER_TRAINING_PROCESSES",
        f"{len(found)} training process{'es' if len(found) > 1 else ''} still running: "
        + ", ".join(f"{t.process.pid} {t.reason}" for t in found[:5]),
        f"If they are stale, stop them (`kill {pids}`, then `kill -9` after a minute) and check `nvidia-smi` "
        "for GPU memory they still hold; they compete for GPUs, CPU and the rendezvous port.",
        evidence={"processes": "\n".join(lines)},
        metrics=(Metric("leftover_training_processes", len(found)),),
    )


def default_port_user(port: int, env: Mapping[str, str], launch: LaunchCommand | None) -> str | None:
    """What in the job rendezvous on ``port``, in words; None when the job picks a free port itself.

    ``torchrun --standalone`` (the job preflight is for, and the assumption without ``--launch``)
    binds a free port; a rendezvous on the default port comes from torchrun without ``--standalone``
    (``--master-port``, default 29500), DeepSpeed's runner (``--master_port``, default 29500), an
    ``--rdzv-endpoint`` naming the port, or ``MASTER_PORT`` set for an ``env://`` rendezvous.
    """
    job_env = {**env, **(launch.env if launch else {})}
    if launch is None or launch.launcher == "python":
        if job_env.get("MASTER_PORT", "").strip() == str(port):
            return f"MASTER_PORT={port} is set in the job's environment"
        return None
    if launch.launcher == "torchrun":
        if launch.option("standalone"):
            return None
        endpoint = launch.option("rdzv-endpoint")
        if isinstance(endpoint, str) and endpoint:
            return f"--rdzv-endpoint {endpoint} names it" if endpoint.rpartition(":")[2] == str(port) else None
        chosen = launch.option("master-port")
        if isinstance(chosen, str):
            return f"--master-port {port} names it" if chosen.strip() == str(port) else None
        return "torchrun without --standalone rendezvous on --master-port, 29500 by default"
    chosen = launch.option("master_port")
    if isinstance(chosen, str):
        return f"--master_port {port} names it" if chosen.strip() == str(port) else None
    return "the deepspeed runner rendezvous on --master_port, 29500 by default"


def judge_rendezvous_port(port: PortFacts, user: str | None = None) -> Verdict:
    """WARN when something listens on the port the job's rendezvous uses (``user``, from
    :func:`default_port_user`); a taken port the job does not use is a PASS with a note."""
    if port.state == "free":
        return passed(f"nothing listens on the default rendezvous port {port.port}")
    if port.state == "unknown":
        return skip(f"cannot tell who listens on port {port.port}: {port.evidence}")
    owner = f" (pid {', '.join(map(str, port.pids))})" if port.pids else " (owner hidden: run as root to see it)"
    if user is None:
        return passed(
            f"port {port.port} is taken{owner}, but torchrun --standalone picks a free port for its rendezvous",
            remediation=f"Only a launch on the default port would fail ('address already in use'): DeepSpeed's "
            f"runner, accelerate, torchrun without --standalone or MASTER_PORT={port}; pass --launch to have it "
            f"judged. The owner: `ss -ltnp 'sport = :{port.port}'`.",
            evidence={"listener": port.evidence},
        )
    return warn(
        "RENDEZVOUS_PORT_IN_USE",
        f"port {port.port}, where the job's rendezvous listens ({user}), is taken{owner}",
        f"Find the owner with `ss -ltnp 'sport = :{port.port}'` and stop it if stale, or launch with "
        "`torchrun --standalone` (picks a free port) or `--master-port <free port>`; otherwise the job fails "
        "with 'address already in use'.",
        evidence={"listener": port.evidence},
    )


def env_findings(env: Mapping[str, str], *, ranks: int, cores_per_rank: float | None) -> list[EnvFinding]:
    """Every variable left set that slows or breaks a job, and OMP_NUM_THREADS when it matters."""
    found: list[EnvFinding] = []

    def flag(variable: str, why: str, fix: str | None = None) -> None:
        value = env.get(variable)
        if value is not None and value.strip().lower() not in _FALSY:
            found.append(EnvFinding(variable, value, why, fix or f"unset {variable}"))

    flag("CUDA_LAUNCH_BLOCKING", "every CUDA kernel launch waits for the GPU: training runs several times slower")
    debug = env.get("NCCL_DEBUG", "").strip().upper()
    if debug in ("INFO", "TRACE"):
        found.append(EnvFinding("NCCL_DEBUG", env["NCCL_DEBUG"],
                                "logs every communicator and channel setup on every rank"
                                + (" and every call (TRACE slows collectives)" if debug == "TRACE" else ""),
                                "export NCCL_DEBUG=WARN"))
    flag("NCCL_P2P_DISABLE", "GPU-to-GPU traffic goes through host memory instead of NVLink/PCIe P2P: "
         "all-reduce bandwidth can drop tenfold")
    if env.get("NCCL_P2P_LEVEL", "").strip().upper() in ("LOC", "0"):
        found.append(EnvFinding("NCCL_P2P_LEVEL", env["NCCL_P2P_LEVEL"],
                                "LOC disables peer-to-peer between all GPUs, like NCCL_P2P_DISABLE",
                                "unset NCCL_P2P_LEVEL"))
    flag("NCCL_SHM_DISABLE", "without shared memory NCCL falls back to sockets between GPUs that cannot use P2P")
    for name in ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"):
        flag(name, "each collective blocks the CPU until it finishes, removing compute/communication overlap")
    flag("PYTORCH_NO_CUDA_MEMORY_CACHING", "the caching allocator is off: every allocation calls cudaMalloc")
    if env.get("TORCH_DISTRIBUTED_DEBUG", "").strip().upper() == "DETAIL":
        found.append(EnvFinding("TORCH_DISTRIBUTED_DEBUG", env["TORCH_DISTRIBUTED_DEBUG"],
                                "adds a consistency-check collective before every collective",
                                "unset TORCH_DISTRIBUTED_DEBUG"))
    if "OMP_NUM_THREADS" not in env and ranks > 1 and cores_per_rank and cores_per_rank >= OMP_WARN_CORES_PER_RANK:
        threads = int(cores_per_rank)
        found.append(EnvFinding("OMP_NUM_THREADS", None,
                                f"unset, so torchrun sets it to 1 for each of the {ranks} ranks: CPU-side torch work "
                                f"uses 1 of the {threads} cores each rank has",
                                f"export OMP_NUM_THREADS={threads}"))
    found += [EnvFinding(f.variable, f.value, f.why, f.fix)
              for f in job_environment_findings(env, ranks=ranks, cores_per_rank=cores_per_rank) if f.warns]
    return found


def env_notes(env: Mapping[str, str]) -> list[JobEnvFinding]:
    """Variables worth a word that do not change the job (``MASTER_PORT`` under ``--standalone``)."""
    return [f for f in job_environment_findings(env, ranks=1, cores_per_rank=None) if not f.warns]


def judge_environment_per_rank(env: Mapping[str, str], ranks: int, cpu: CpuMemoryFacts) -> Verdict:
    """:func:`judge_environment` for the job's ranks on this host's usable CPUs."""
    cpus = cpu.effective_cpus
    return judge_environment(env, ranks=ranks, cores_per_rank=cpus / ranks if cpus and ranks else None)


def judge_environment(env: Mapping[str, str], *, ranks: int, cores_per_rank: float | None) -> Verdict:
    """WARN for variables left set that slow or break a job, each with why."""
    relevant = {k: v for k, v in sorted(env.items())
                if k.startswith(("NCCL_", "TORCH_NCCL_", "CUDA_LAUNCH", "OMP_")) or k in EVIDENCE_NAMES}
    evidence = {"environment": "\n".join(f"{k}={v}" for k, v in relevant.items()) or "no NCCL_/OMP_ variables set"}
    findings = env_findings(env, ranks=ranks, cores_per_rank=cores_per_rank)
    notes = env_notes(env)
    noted = "".join(f"; noted: {_described(f.variable, f.value, f.why)}" for f in notes)
    if not findings:
        return passed("no environment variables that slow or break a job" + noted, evidence=evidence,
                      details={"variables": [], "noted": [f.variable for f in notes]})
    described = "; ".join(_described(f.variable, f.value, f.why) for f in findings)
    return warn("ENV_HYGIENE", described + noted, "; ".join(dict.fromkeys(f.fix for f in findings)),
                evidence=evidence, details={"variables": [f.variable for f in findings],
                                            "noted": [f.variable for f in notes]})


def _described(variable: str, value: str | None, why: str) -> str:
    return f"{variable}{'=' + value if value is not None else ''}: {why}"


def pcie_evidence(facts: PcieFacts) -> dict[str, str]:
    """Evidence a peer-to-peer check attaches to its FAIL: kernel IOMMU parameters and ACSCtl lines."""
    params = " ".join(f"{k}={v}" for k, v in facts.kernel_parameters.items()) or "none"
    evidence = {"iommu": f"mode {facts.iommu_mode}; IOMMU kernel parameters: {params}; "
                         f"IOMMU groups: {'unreadable' if facts.iommu_groups is None else facts.iommu_groups}"}
    if facts.lspci_excerpt:
        evidence["lspci ACSCtl"] = facts.lspci_excerpt
    elif facts.lspci_problem:
        evidence["lspci ACSCtl"] = facts.lspci_problem
    return evidence


def judge_pcie_evidence(facts: PcieFacts) -> Verdict:
    """Report IOMMU mode and ACS redirect as evidence; the P2P checks decide whether they hurt."""
    if facts.cmdline is None and facts.acs is None and facts.iommu_groups is None:
        return skip(f"no IOMMU or ACS information readable here ({facts.lspci_problem or 'no /proc/cmdline'})")
    parts = [f"IOMMU {facts.iommu_mode}"]
    if facts.iommu_groups is not None:
        parts.append(f"{facts.iommu_groups} IOMMU groups")
    if "pci" in facts.kernel_parameters:
        parts.append(f"pci={facts.kernel_parameters['pci']}")
    if facts.acs is not None and facts.acs.controls:
        parts.append(f"ACS redirect enabled on {len(facts.acs.redirecting)} of {len(facts.acs.controls)} "
                     "ACS-capable devices")
    elif facts.acs is not None:
        parts.append(f"no ACS control reported by lspci ({facts.acs.devices} devices)")
    if facts.lspci_problem:
        parts.append(facts.lspci_problem)
    evidence = {"kernel command line": facts.cmdline or "unreadable", **pcie_evidence(facts)}
    risky = facts.iommu_mode == "translated" or bool(facts.acs and facts.acs.redirecting)
    return passed("; ".join(parts), evidence=evidence, details={"p2p_risk": risky, "iommu_mode": facts.iommu_mode})
