"""Judge all-reduce sweeps: P2P on vs off, measured vs expected busbw.

Definitions follow nccl-tests (``doc/PERFORMANCE.md``): ``algbw = bytes / time`` and, for
all-reduce, ``busbw = algbw * 2(n-1)/n``, in GB/s with GB = 10^9.

Thresholds, and why:

* ``CLEARLY_FASTER = 1.15``: one configuration is "clearly" faster when its peak busbw beats the
  other's by 15 % or more. Repeated sweeps on one node differ by a few percent (nccl-tests captures
  show single in-place outliers, which a peak over several sizes absorbs), so 15 % is outside
  noise, while P2P-vs-SHM differences that matter are 20 % to 10x.
* ``WARN_BELOW = 0.70`` and ``FAIL_BELOW = 0.40`` of the expected peak. Reference figures are peaks
  at >= 1 GiB; the quick profile stops near 256 MiB where nccl-tests tables reach 87-95 % of the
  peak (8x H100 NVLS 412/476, 4x H100 340/356, 8x A100 212/233), and torch adds a few percent of
  overhead, so a healthy node lands around 80 %. Under 70 % something costs real time; under 40 %
  a whole link class is missing (NVLink not used, ring crossing PCIe or host memory), which is a
  different machine than the one paid for.
* ``MIN_JUDGED_BYTES = 64 MiB``: smaller messages are latency-bound and say nothing about the
  bandwidth the reference figures describe; below it figures are reported, not judged.
"""

from __future__ import annotations

from preflight.judge.busbw_reference import Expectation
from preflight.outcome import Metric, Verdict, error, fail, passed, skip, warn
from preflight.probe.sweep import RunStatus, SweepRun
from preflight.workers.bandwidth import algbw_gbps, allreduce_busbw_gbps

__all__ = ["algbw_gbps", "allreduce_busbw_gbps"]

CLEARLY_FASTER = 1.15
WARN_BELOW = 0.70
FAIL_BELOW = 0.40
MIN_JUDGED_BYTES = 64 * 1024 * 1024

P2P_REMEDIATION = (
    "GPU peer-to-peer transfers are broken on this host. Usual causes, most likely first:\n"
    "1. PCIe ACS (Access Control Services) on the PCIe switches / root ports forces P2P traffic "
    "through the root complex. Disable ACS in the BIOS (often 'PCIe ACS Control' or 'ACS Enable' -> "
    "Disabled), or at runtime for each bridge above the GPUs: "
    "`sudo setpci -s <bridge-BDF> ECAP_ACS+0x6.w=0000` (list bridges with `lspci -vvv | grep -B30 ACSCtl`).\n"
    "2. The IOMMU (Intel VT-d / AMD-Vi) translates P2P addresses. Boot with `iommu=pt` "
    "(passthrough), or `intel_iommu=off` / `amd_iommu=off` when nothing needs the IOMMU "
    "(edit GRUB_CMDLINE_LINUX in /etc/default/grub, `sudo update-grub`, reboot); or disable "
    "VT-d / IOMMU in the BIOS.\n"
    "3. In a VM, the hypervisor must pass the GPUs through with P2P allowed (GPUs behind one PCIe "
    "switch, ACS off on the host); on a cloud VM ask the provider or pick an instance type "
    "documented with GPU P2P.\n"
    "4. Update the NVIDIA driver; consumer GPUs (GeForce) have no P2P over PCIe with the stock driver.\n"
    "Workaround now: start the job with `export NCCL_P2P_DISABLE=1` (NCCL then uses host shared "
    "memory); {cost}"
)


def human_bytes(nbytes: int) -> str:
    """``268435456`` -> ``256 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{nbytes} B"


RUN_DEADLINE = "RUN_DEADLINE"


def not_run(*runs: SweepRun) -> Verdict | None:
    """ERROR ``RUN_DEADLINE`` when a sweep was stopped by the run's deadline or never started: the node
    was not measured, which is neither a pass nor its fault."""
    for run in runs:
        if run.status is RunStatus.NOT_RUN:
            return error(f"all-reduce sweep ({run.label}) {run.launch_summary or 'not run'}", code=RUN_DEADLINE)
    return None


def describe_failure(run: SweepRun) -> str:
    """One line per rank that did not finish, e.g. ``rank 1: hung; last output: ...``."""
    if run.status is RunStatus.HUNG and not run.not_finished():
        deadline = f" within {run.deadline_s:.0f} s" if run.deadline_s else ""
        return f"{run.label}: no rank reported{deadline} (hung)"
    lines = [f"{run.label}: {run.status.value}" + (f": {run.launch_summary}" if run.launch_summary else "")]
    for note in run.not_finished():
        detail = f": {note.detail}" if note.detail else ""
        lines.append(f"  rank {note.rank} {note.state}{detail}")
    return "\n".join(lines)


def _status_words(run: SweepRun) -> str:
    """``hung (ranks 0, 1 did not finish within 60 s)`` or ``failed (rank 1 crashed)``."""
    stuck = run.not_finished()
    ranks = ", ".join(str(n.rank) for n in stuck)
    if run.status is RunStatus.HUNG:
        within = f" within {run.deadline_s:.0f} s" if run.deadline_s else ""
        return f"hung (ranks {ranks} did not finish{within})" if stuck else f"hung (no rank finished{within})"
    if run.status is RunStatus.FAILED:
        return f"failed ({', '.join(f'rank {n.rank} {n.state}' for n in stuck)})" if stuck else "failed"
    return "returned wrong values" if run.wrong_sizes else "completed"


def _peak_text(run: SweepRun) -> str:
    """``18.2 GB/s busbw at 256 MiB``."""
    peak = run.peak
    if peak is None:
        return "no figures"
    return f"{peak.busbw_gbps:.1f} GB/s busbw at {human_bytes(peak.bytes)}"


def _cost_text(p2p_off: SweepRun, expected: Expectation | None) -> str:
    """The measured price of the workaround, as plain words."""
    peak = p2p_off.peak
    if peak is None:
        return "its cost could not be measured."
    text = f"measured here it reaches {peak.busbw_gbps:.1f} GB/s busbw"
    if expected is not None:
        text += (f", {peak.busbw_gbps / expected.busbw_gbps:.0%} of the {expected.busbw_gbps:.0f} GB/s "
                 f"expected for {expected.platform}")
    return text + "."


def _metrics(run: SweepRun, prefix: str) -> tuple[Metric, ...]:
    """Peak busbw of a run as a metric (nothing when it has no figures)."""
    peak = run.peak
    if peak is None:
        return ()
    return (Metric(f"{prefix}_busbw_peak", round(peak.busbw_gbps, 3), "GB/s", {"run": run.label}),)


def _evidence(*runs: SweepRun) -> dict[str, str]:
    """Per-run status and, for failed runs, what each rank logged."""
    evidence: dict[str, str] = {}
    for run in runs:
        if run.ok and not run.wrong_sizes:
            evidence[run.label] = f"completed on {run.world_size} ranks ({run.backend}): {_peak_text(run)}"
        else:
            evidence[run.label] = describe_failure(run)
    return evidence


def judge_p2p_worth_keeping(
    p2p_on: SweepRun, p2p_off: SweepRun, expected: Expectation | None = None, *, workaround_set: bool = False
) -> Verdict:
    """Compare a launch with P2P allowed against one with ``NCCL_P2P_DISABLE=1``.

    ``workaround_set``: the job's own environment already sets ``NCCL_P2P_DISABLE`` (``p2p_off`` is the
    as-is run), so broken P2P is a WARN: the job will run, at the measured cost, and the host still
    needs fixing.
    """
    stopped = not_run(p2p_on, p2p_off)
    if stopped is not None:
        return stopped
    on_works = p2p_on.ok and not p2p_on.wrong_sizes
    off_works = p2p_off.ok and not p2p_off.wrong_sizes
    metrics = _metrics(p2p_on, "p2p_on") + _metrics(p2p_off, "p2p_off")
    evidence = _evidence(p2p_on, p2p_off)
    gpus = f"{p2p_on.world_size} GPUs"
    if not on_works and not off_works:
        return fail(
            "NCCL_ALLREDUCE_FAILED",
            f"all-reduce on {gpus} did not work with P2P ({_status_words(p2p_on)}) nor with "
            f"NCCL_P2P_DISABLE=1 ({_status_words(p2p_off)})",
            "NCCL cannot run a collective on this node in either mode. Read each rank's lines in the "
            "evidence (or `preflight nccl-log <saved log>`). Common causes: the NVIDIA driver and the "
            "CUDA runtime in torch do not match "
            "(`nvidia-smi` vs `python -c 'import torch; print(torch.version.cuda)'`), "
            "the NVSwitch fabric manager is not running on HGX systems (`systemctl status nvidia-fabricmanager`), "
            "/dev/shm is too small in a container (`df -h /dev/shm`; run with `--ipc=host` or `--shm-size=8g`), "
            "or a GPU is in a bad state (`nvidia-smi -q | grep -i -A3 'xid\\|retired\\|remapp'`; reset or reboot).",
            metrics=metrics,
            evidence=evidence,
        )
    if not on_works:
        broken = "returned wrong values" if p2p_on.ok else _status_words(p2p_on)
        summary = (f"all-reduce with GPU peer-to-peer {broken} on {gpus}, while NCCL_P2P_DISABLE=1 "
                   f"worked ({_peak_text(p2p_off)})")
        remediation = P2P_REMEDIATION.format(cost=_cost_text(p2p_off, expected))
        if workaround_set:
            return warn("NCCL_P2P_BROKEN", summary + "; the job's environment already sets NCCL_P2P_DISABLE, so it "
                        "will run at that speed", remediation, metrics=metrics, evidence=evidence)
        return fail("NCCL_P2P_BROKEN", summary, remediation, metrics=metrics, evidence=evidence)
    if not off_works:
        return warn(
            "NCCL_P2P_DISABLED_FAILS",
            f"all-reduce works with P2P ({_peak_text(p2p_on)}) but {_status_words(p2p_off)} with "
            f"NCCL_P2P_DISABLE=1 on {gpus}: the usual workaround would not work here",
            "Jobs run as they are; do not set NCCL_P2P_DISABLE=1 on this host. Without P2P NCCL falls back "
            "to host shared memory, so check /dev/shm: `df -h /dev/shm` (at least 1 GiB; in Docker use "
            "`--ipc=host` or `--shm-size=8g`), and that NCCL_SHM_DISABLE is not set.",
            metrics=metrics,
            evidence=evidence,
        )
    return _compare_speeds(p2p_on, p2p_off, metrics, evidence, workaround_set)


def _compare_speeds(
    p2p_on: SweepRun, p2p_off: SweepRun, metrics: tuple[Metric, ...], evidence: dict[str, str], workaround_set: bool
) -> Verdict:
    """Both runs worked: is P2P-off clearly faster over the sizes both measured?"""
    common = sorted({s.bytes for s in p2p_on.sizes} & {s.bytes for s in p2p_off.sizes})
    if not common:
        return skip("the two runs share no message size, so they cannot be compared",
                    metrics=metrics, evidence=evidence)
    on_peak = max(p2p_on.busbw_at(n) or 0.0 for n in common)
    off_peak = max(p2p_off.busbw_at(n) or 0.0 for n in common)
    both = (f"P2P enabled {on_peak:.1f} GB/s, NCCL_P2P_DISABLE=1 {off_peak:.1f} GB/s busbw peak "
            f"on {p2p_on.world_size} GPUs")
    if on_peak > 0 and off_peak >= on_peak * CLEARLY_FASTER and workaround_set:
        return passed(f"{both}: NCCL_P2P_DISABLE=1, already set in the job's environment, is the faster choice here",
                      metrics=metrics, evidence=evidence)
    if on_peak > 0 and off_peak >= on_peak * CLEARLY_FASTER:
        gain = off_peak / on_peak - 1
        return warn(
            "NCCL_P2P_SLOWER_THAN_SHM",
            f"disabling GPU peer-to-peer makes all-reduce {gain:.0%} faster: {both}",
            f"Run jobs on this host with `export NCCL_P2P_DISABLE=1` (all-reduce {on_peak:.1f} -> "
            f"{off_peak:.1f} GB/s busbw). P2P slower than host memory usually means PCIe ACS or the IOMMU "
            "routes P2P through the root complex; see NCCL_P2P_BROKEN's remedies (ACS off, `iommu=pt`) to "
            "get P2P speed back instead.",
            metrics=metrics,
            evidence=evidence,
        )
    ratio = on_peak / off_peak if off_peak > 0 else float("inf")
    relation = f"P2P is {ratio:.1f}x as fast" if ratio != float("inf") else "P2P disabled measured nothing"
    return passed(f"{both} ({relation}); keep P2P enabled", metrics=metrics, evidence=evidence)


def judge_busbw(run: SweepRun, expected: Expectation | None) -> Verdict:
    """Peak busbw of ``run`` against the expected figure for this platform (figures only without one)."""
    stopped = not_run(run)
    if stopped is not None:
        return stopped
    if not run.ok:
        return fail(
            "NCCL_ALLREDUCE_FAILED",
            f"the all-reduce sweep on {run.world_size} ranks ({run.backend}) {_status_words(run)}",
            "The collective the training job depends on does not complete. Read each rank's output in "
            "the evidence; run `preflight nccl-log <log>` on a saved NCCL_DEBUG=INFO log for the "
            "transports and NCCL WARN lines.",
            evidence=_evidence(run),
        )
    if run.wrong_sizes:
        sizes = ", ".join(human_bytes(s.bytes) for s in run.wrong_sizes)
        return fail(
            "NCCL_ALLREDUCE_WRONG_RESULT",
            f"all-reduce on {run.world_size} ranks returned wrong values at {sizes}",
            "Reduced values differ from what every rank contributed: silent data corruption. Do not train "
            "on this node. Retry with `NCCL_P2P_DISABLE=1` to see whether peer-to-peer is the cause, check "
            "`nvidia-smi -q` for ECC / remapped-row errors, and report the node to the provider.",
            evidence=_evidence(run),
        )
    peak = max(run.sizes, key=lambda s: s.busbw_gbps)
    measured = Metric("busbw_peak", round(peak.busbw_gbps, 3), "GB/s", {"run": run.label})
    figures = (f"peak all-reduce busbw {peak.busbw_gbps:.1f} GB/s at {human_bytes(peak.bytes)} "
               f"on {run.world_size} ranks ({run.backend})")
    if expected is None:
        return passed(f"{figures}; no reference figure for this platform, so not judged", metrics=(measured,))
    ratio = peak.busbw_gbps / expected.busbw_gbps
    metrics = (measured, Metric("busbw_expected", expected.busbw_gbps, "GB/s"), Metric("busbw_ratio", round(ratio, 3)))
    evidence = {"expected": f"{expected.busbw_gbps:.0f} GB/s for {expected.platform}: {expected.source}"}
    largest = run.largest
    if largest is not None and largest.bytes < MIN_JUDGED_BYTES:
        return passed(
            f"{figures}; largest size {human_bytes(largest.bytes)} is below {human_bytes(MIN_JUDGED_BYTES)}, "
            f"too small to compare with the {expected.busbw_gbps:.0f} GB/s reference",
            metrics=metrics,
            evidence=evidence,
        )
    versus = f"{figures}: {ratio:.0%} of the {expected.busbw_gbps:.0f} GB/s expected for {expected.platform}"
    remediation = (
        "Compare the transports NCCL chose (NCCL_DEBUG=INFO lines `via P2P/...`, `via SHM`, NVLS) with "
        "the hardware: `nvidia-smi topo -m` for NVLink, `nvidia-smi nvlink -s` for inactive links, "
        "`systemctl status nvidia-fabricmanager` on NVSwitch systems, unset NCCL_* variables that "
        "restrict transports (NCCL_P2P_LEVEL, NCCL_ALGO, NCCL_NVLS_ENABLE=0), and check that no other "
        "process uses the GPUs (`nvidia-smi`). If this figure is right for your hardware, pass "
        "`--expect-busbw <GB/s>`."
    )
    if ratio < FAIL_BELOW:
        return fail("NCCL_BUSBW_LOW", versus + f" (below {FAIL_BELOW:.0%})", remediation,
                    metrics=metrics, evidence=evidence)
    if ratio < WARN_BELOW:
        return warn("NCCL_BUSBW_LOW", versus + f" (below {WARN_BELOW:.0%})", remediation,
                    metrics=metrics, evidence=evidence)
    return passed(versus, metrics=metrics, evidence=evidence)
