"""NCCL_* variables inherited by the job that cost all-reduce speed, and what they cost here.

Images and shell profiles often carry a knob set once to work around a problem on another machine
(``NCCL_P2P_DISABLE=1``, ``NCCL_P2P_LEVEL=LOC``, a stale ``NCCL_TOPO_FILE``). The check measures the
sweep with the environment as it is and with these variables removed; this module names the
variables and turns the two figures into a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from preflight.judge.nccl import CLEARLY_FASTER, not_run
from preflight.outcome import Metric, Verdict, passed, skip, warn
from preflight.probe.sweep import SweepRun, env_flag_set

_DEFAULT_BUFFSIZE = 4 * 1024 * 1024
_RESTRICTIVE_P2P_LEVELS = {
    "LOC": "disables P2P", "0": "disables P2P", "NVL": "allows P2P over NVLink only",
    "PIX": "allows P2P only behind one PCIe switch", "1": "allows P2P only behind one PCIe switch",
    "PXB": "allows P2P only across PCIe switches, not the CPU",
    "2": "allows P2P only across PCIe switches, not the CPU",
}


@dataclass(frozen=True, slots=True)
class CostlyVariable:
    """An ``NCCL_*`` setting that can slow collectives, with the reason in plain words."""

    name: str
    value: str
    why: str

    @property
    def assignment(self) -> str:
        """``NCCL_P2P_DISABLE=1``."""
        return f"{self.name}={self.value}"


def costly_nccl_variables(env: Mapping[str, str]) -> tuple[CostlyVariable, ...]:
    """The variables in ``env`` that restrict NCCL's transports, algorithms or topology."""
    found: list[CostlyVariable] = []
    for name in sorted(k for k in env if k.startswith("NCCL_")):
        value = env[name].strip()
        why = _why_costly(name, value)
        if why:
            found.append(CostlyVariable(name, value, why))
    return tuple(found)


def _why_costly(name: str, value: str) -> str | None:
    """Why ``name=value`` can cost speed, or None when it does not."""
    if name == "NCCL_P2P_DISABLE" and env_flag_set(value):
        return "turns GPU peer-to-peer off (NVLink and PCIe P2P); traffic goes through host memory"
    if name == "NCCL_P2P_LEVEL" and value.upper() in _RESTRICTIVE_P2P_LEVELS:
        return f"{_RESTRICTIVE_P2P_LEVELS[value.upper()]}; other GPU pairs go through host memory"
    if name == "NCCL_SHM_DISABLE" and env_flag_set(value):
        return "turns the shared-memory transport off; GPUs without P2P fall back to sockets"
    if name == "NCCL_NVLS_ENABLE" and value == "0":
        return "turns NVLink SHARP off (8x H100/H200: ~370 instead of ~480 GB/s busbw)"
    if name == "NCCL_CUMEM_ENABLE" and value == "0":
        return "turns cuMem allocations off, which NVLS needs (NCCL WARN nvls.cc 'invalid argument')"
    if name in ("NCCL_ALGO", "NCCL_PROTO") and value:
        return "forces NCCL's choice instead of letting its tuner pick the fastest per size"
    if name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS") and value:
        return "caps the number of channels, and with it the bandwidth one collective can use"
    if name == "NCCL_BUFFSIZE" and value.isdigit() and int(value) < _DEFAULT_BUFFSIZE:
        return "shrinks NCCL's buffers below the 4 MiB default"
    if name in ("NCCL_TOPO_FILE", "NCCL_GRAPH_FILE") and value:
        return ("replaces the detected topology with a file; a stale one cost an H200 node 15 vs 431 GB/s "
                "(Azure/azurehpc-health-checks#142)")
    return None


def judge_nccl_env(
    env: Mapping[str, str], as_is: SweepRun | None = None, without: SweepRun | None = None
) -> Verdict:
    """WARN when inherited NCCL_* variables cost speed; ``without`` is the run with them removed."""
    costly = costly_nccl_variables(env)
    if not costly:
        return passed("no NCCL_* variable that restricts transports, algorithms or topology is set")
    names = ", ".join(v.assignment for v in costly)
    evidence = {v.assignment: v.why for v in costly}
    unset = " ".join(v.name for v in costly)
    remediation = (
        f"Unless it was set on purpose for this host, remove it from the job's environment: `unset {unset}` "
        "and delete it where it comes from (~/.bashrc, /etc/environment, the Dockerfile's ENV, the job script). "
        + " ".join(f"{v.assignment} {v.why}." for v in costly)
    )
    if as_is is None or without is None:
        return warn("NCCL_ENV_COSTS_SPEED", f"{names} set in the job's environment; its cost was not measured",
                    remediation, evidence=evidence)
    stopped = not_run(as_is, without)
    if stopped is not None:
        return stopped
    if not as_is.ok:
        return skip(f"{names} is set, but the run with it did not complete; the bandwidth check reports that")
    if not without.ok:
        return passed(f"{names} is set and needed here: without it the all-reduce {without.status.value}",
                      evidence={**evidence, without.label: without.status.value})
    common = {s.bytes for s in as_is.sizes} & {s.bytes for s in without.sizes}
    if not common:
        return skip("the runs with and without the NCCL_* variables share no message size")
    with_peak = max(as_is.busbw_at(n) or 0.0 for n in common)
    without_peak = max(without.busbw_at(n) or 0.0 for n in common)
    metrics = (
        Metric("busbw_with_env", round(with_peak, 3), "GB/s"),
        Metric("busbw_without_env", round(without_peak, 3), "GB/s"),
    )
    figures = f"{with_peak:.1f} GB/s busbw with it, {without_peak:.1f} GB/s without"
    if with_peak > 0 and without_peak >= with_peak * CLEARLY_FASTER:
        cost = 1 - with_peak / without_peak
        return warn("NCCL_ENV_COSTS_SPEED",
                    f"{names} in the job's environment costs {cost:.0%} of all-reduce speed: {figures}",
                    remediation, metrics=metrics, evidence=evidence)
    return passed(f"{names} is set but costs nothing measurable here: {figures}", metrics=metrics, evidence=evidence)
