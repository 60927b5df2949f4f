"""The training script's classic traps, read statically with ``ast`` (the script never runs).

``scan_script(source, path)`` parses the text and runs every trap of
:mod:`preflight.judge.script_traps.traps`; ``judge_script_traps(scan)`` turns the result into one
verdict. Every finding is a WARN that names the file and line and says it comes from static
analysis, which can be wrong (a rank test hidden in a helper, a collective behind a dynamic call).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from preflight.judge.findings import Finding, findings_verdict, problem
from preflight.judge.script_traps.scan import line_text, walk_module
from preflight.judge.script_traps.traps import (
    Trap,
    device_placement,
    fsdp_rank0_save,
    rank_branch_collectives,
    resumes_from_checkpoint,
    sampler_epochs,
)
from preflight.outcome import Status, Verdict, fail, passed

__all__ = ["ScriptScan", "Trap", "judge_script_traps", "scan_script"]

CAVEAT = "static analysis of the source: it can be wrong, check the lines named"
DETECTORS = (rank_branch_collectives, device_placement, sampler_epochs, fsdp_rank0_save)


@dataclass(frozen=True, slots=True)
class ScriptScan:
    """The traps found in one script, whether it resumes from a checkpoint, or why it did not parse."""

    path: str
    traps: tuple[Trap, ...]
    resumes: bool | None
    source_lines: dict[int, str]
    syntax_error: str | None = None


def scan_script(source: str, path: str) -> ScriptScan:
    """Parse ``source`` and look for every trap; a syntax error is kept, never raised."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return ScriptScan(path, (), None, {}, f"line {exc.lineno}: {exc.msg}")
    except ValueError as exc:  # null bytes
        return ScriptScan(path, (), None, {}, str(exc))
    except RecursionError:
        return ScriptScan(path, (), None, {}, "nested too deeply for Python's parser")
    walk = walk_module(tree, source)
    traps: list[Trap] = []
    for detector in DETECTORS:
        traps.extend(detector(walk, source))
    unique = {(t.line, t.code): t for t in traps}
    ordered = tuple(sorted(unique.values(), key=lambda t: (t.line, t.code)))
    return ScriptScan(path, ordered, resumes_from_checkpoint(walk),
                      {t.line: line_text(source, t.line) for t in ordered})


def judge_script_traps(scan: ScriptScan) -> Verdict:
    """WARN per trap found (file:line, the source line, the corrected form); PASS when none is found."""
    if scan.syntax_error:
        return fail("SCRIPT_SYNTAX_ERROR", f"{scan.path} does not parse ({scan.syntax_error}): the job stops at start",
                    f"Fix the syntax error in {scan.path} ({scan.syntax_error}).")
    findings: list[Finding] = [
        problem(Status.WARN, trap.code, f"{scan.path}:{trap.line}",
                f"{trap.message} [{scan.source_lines.get(trap.line, '')}]", trap.fix)
        for trap in scan.traps
    ]
    details = {"script": scan.path, "resumes_from_checkpoint": scan.resumes}
    if not findings:
        return passed(f"no classic trap found in {scan.path} (static analysis of the source: it can miss traps)",
                      details=details)
    return findings_verdict(findings, ok_summary="", subject="static scan", caveat=CAVEAT, details=details)
