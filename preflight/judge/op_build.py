"""Judging the build of the DeepSpeed ops the ZeRO rehearsal needs (done ahead of its launch).

A slow first build is reported as what it is, with its time: a job JIT-building the same ops pays
it at its first step. A build that did not finish within its budget is a WARN (the node works, the
first step is slow; the compiled objects are kept so the next run resumes), a failed one a FAIL
with the compiler's words, pre-built ops that refuse to load (DeepSpeed's ``validate_torch_version``)
a FAIL with DeepSpeed's own message.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from preflight.outcome import Metric, Verdict, error, fail, passed, warn
from preflight.parse.op_build import find_op_build_failure
from preflight.probe.deepspeed_ops import EXTENSIONS_DIR_ENV, ZERO_BUILDERS, BuilderSpec, OpBuild

OP_BUILD_FIX = ("DeepSpeed compiles its ops at the first step with ninja and a C++ compiler (and nvcc from "
                "CUDA_HOME for CUDA ops): install the CUDA toolkit whose major version matches torch.version.cuda "
                "(see the toolkit checks), ninja and g++, or install DeepSpeed with its ops pre-built "
                "(DS_BUILD_OPS=1 pip install --no-build-isolation deepspeed).")
SLOW_FIX = ("Run preflight again: the build resumes from the objects already compiled. Or give it more time: "
            "--op-build-timeout SECONDS (and --timeout). To spare the job its first-step build, pre-build DeepSpeed's "
            "ops at install time (DS_BUILD_OPS=1 pip install --no-build-isolation deepspeed).")
REINSTALL_FIX = ("Re-install DeepSpeed against this torch: pip install --force-reinstall --no-cache-dir "
                 "--no-build-isolation deepspeed (DS_BUILD_OPS=1 to pre-build its ops again), or switch back to the "
                 "torch it was installed with.")


def _killed(build: OpBuild) -> bool:
    return build.returncode is not None and build.returncode < 0 and not build.timed_out


def _signal_name(returncode: int | None) -> str:
    try:
        return signal.Signals(-(returncode or 0)).name
    except ValueError:
        return f"signal {-(returncode or 0)}"


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def pending_builders(build: OpBuild, builders: Sequence[BuilderSpec] = ZERO_BUILDERS) -> list[str]:
    """The builders the child had not reported yet (the first one was compiling when it stopped)."""
    done = {op.builder for op in build.ops}
    return [entry["builder"] for entry in builders if entry["builder"] not in done]


def op_build_metrics(build: OpBuild) -> list[Metric]:
    """Seconds per op (labelled by op and how it was obtained) and the build's wall time."""
    metrics = [Metric("op_build_wall_time", round(build.duration_s, 3), "s")]
    for op in build.ops:
        if op.source in ("built", "cached", "prebuilt", "failed"):
            metrics.append(Metric("op_load_time", round(op.seconds, 3), "s", {"op": op.name, "source": op.source}))
    return metrics


def describe_ops(build: OpBuild) -> str:
    """``deepspeed_shm_comm (CPU, c++) built in 46 s; fused_adam (CPU, c++) built in 84 s``."""
    return "; ".join(op.describe() for op in build.ops if op.source not in ("absent",)) or "no op reported"


def judge_op_build(build: OpBuild) -> Verdict:
    """PASS naming each op, how it was obtained and how long it took; WARN for a build that ran out of
    its budget; FAIL for a build that failed or pre-built ops DeepSpeed refuses; ERROR when busy."""
    evidence = {"build log (tail)": build.tail()}
    if build.stale_locks:
        evidence["stale torch build locks removed"] = "\n".join(build.stale_locks)
    metrics = tuple(op_build_metrics(build))
    where = build.directory or "preflight's extensions directory"
    accelerator = f"{build.accelerator} accelerator" if build.accelerator else "accelerator unknown"
    who = f"DeepSpeed {(build.versions or {}).get('deepspeed', '?')} ({accelerator})"
    if build.unusable is not None:
        return error(f"{build.unusable}: DeepSpeed's ops were not built or checked", code="OP_CACHE_UNUSABLE",
                     remediation=f"Point {EXTENSIONS_DIR_ENV} at a folder this user can write, or unset it.")
    if build.busy:
        return error(f"another preflight process held {where} for the whole build budget ({build.budget_s:.0f} s)",
                     code="OP_BUILD_BUSY", evidence=evidence, metrics=metrics)
    if build.timed_out:
        pending = pending_builders(build)
        done = describe_ops(build) if build.ops else "nothing finished"
        still = f"{pending[0]} was still compiling" if pending else "the last step did not finish"
        return warn("DEEPSPEED_OP_BUILD_SLOW",
                    f"the first build of {who}'s ops did not finish within its {build.budget_s:.0f} s budget ({still}; "
                    f"{done}): the ZeRO rehearsals are not run, and a job JIT-building these ops waits as long at its "
                    f"first step; compiled objects are kept in {where}, so the next run resumes",
                    SLOW_FIX, evidence=evidence, metrics=metrics)
    failed = build.failed
    if failed is not None:
        message = failed.error or ""
        if "PyTorch version mismatch" in message or "CUDA version mismatch" in message:
            return fail("DEEPSPEED_PREBUILT_OPS_REFUSED",
                        f"{who} refuses to load its pre-built {failed.name}: {message}", REINSTALL_FIX,
                        evidence=evidence, metrics=metrics)
        found = find_op_build_failure(f"{build.output}\n{message}")
        summary = found.describe() if found is not None else f"DeepSpeed could not load its op {failed.name}: {message}"
        return fail("DEEPSPEED_OP_BUILD_FAILED", f"{who}: {summary}", OP_BUILD_FIX, evidence=evidence,
                    metrics=metrics)
    if not build.ok:
        lines = [line for line in build.tail(40).splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit code {build.returncode}"
        if build.accelerator is None and not _killed(build):
            return fail("DEEPSPEED_IMPORT_FAILED", f"import deepspeed failed in the job's interpreter: {last}",
                        "Read the traceback below; a job importing DeepSpeed here crashes the same way.",
                        evidence=evidence, metrics=metrics)
        if _killed(build):
            pending = pending_builders(build)
            what = f"while loading {pending[0]}" if pending else "after its last op"
            return error(f"the op build child was killed by {_signal_name(build.returncode)} {what} ({last}): a "
                         f"library in {where} is damaged in a way preflight's check of it did not see",
                         code="OP_BUILD_CRASHED", evidence=evidence, metrics=metrics,
                         remediation=f"Remove the folder (rm -rf {where}) and run preflight again: it builds the "
                                     "ops afresh.")
        return error(f"the op build child ended without reporting every op ({last})", code="OP_BUILD_CRASHED",
                     evidence=evidence, metrics=metrics)
    built = build.built
    if built:
        first = ", ".join(f"{op.name} took {_seconds(op.seconds)}" for op in built)
        what = "a new build of a damaged cache entry of" if build.repaired else "first build of"
        summary = (f"{what} {who}'s ops: {first} ({describe_ops(build)}); kept in {where}, so later runs load "
                   "them in seconds - a job JIT-building into its own TORCH_EXTENSIONS_DIR pays this at its first step")
    else:
        summary = f"{who}: {describe_ops(build)}"
    if build.stale_locks:
        summary += f"; removed {len(build.stale_locks)} stale build lock(s) an interrupted build had left"
    if build.repaired:
        summary += (f"; built again {len(build.repaired)} cached librar{'y' if len(build.repaired) == 1 else 'ies'} "
                    f"that no longer matched the build ({'; '.join(build.repaired)})")
    return passed(summary, metrics=metrics, evidence=evidence,
                  details={"directory": build.directory, "accelerator": build.accelerator,
                           "ops": [{"op": op.name, "source": op.source, "seconds": op.seconds, "device": op.device,
                                    "compilers": list(op.compilers), "builder": op.builder_class} for op in build.ops]})


def op_build_blocker(build: OpBuild, title: str) -> str | None:
    """Why a ZeRO rehearsal is not launched after this build (the SKIP reason), or None."""
    if build.ok:
        return None
    state = ("could not start (its cache folder cannot be created)" if build.unusable is not None
             else "did not finish within its budget" if build.timed_out else "is busy" if build.busy
             else "failed" if build.failed is not None else "did not complete")
    return f"{title} not rehearsed: the build of DeepSpeed's ops {state} (the op build's own check says why)"
