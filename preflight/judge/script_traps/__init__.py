"""The training script's classic traps, read statically with ``ast`` (nothing of it runs).

``scan_script(source, path, neighbours)`` parses the script and the modules beside it that it
imports (``neighbours``: their text by path relative to the script's directory, read by the
probe with :func:`~preflight.parse.script_imports.neighbour_files`), walks the calls the
way the job makes them (:mod:`~preflight.judge.script_traps.scan`) and runs every trap;
``judge_script_traps(scan)`` turns the result into one verdict. A finding names the file and line,
what it costs the job and how sure the reading is ("sure": a direct call under a direct rank
test; "likely": through a helper, a name or a pattern); static analysis can be wrong, so every
problem is a WARN.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from preflight.judge.findings import Finding, findings_verdict, note, problem
from preflight.judge.script_traps.data_traps import same_batches, sampler_epochs
from preflight.judge.script_traps.facts import ArgFacts, PipelineStages, ProgramFacts, program_facts
from preflight.judge.script_traps.program import Program
from preflight.judge.script_traps.save_traps import fsdp_rank0_save, resumes_from_checkpoint, same_file_every_rank
from preflight.judge.script_traps.scan import line_text, walk_program
from preflight.judge.script_traps.traps import (
    Trap,
    device_placement,
    rank_branch_collectives,
    sharded_forward_on_one_rank,
)
from preflight.outcome import Status, Verdict, fail, passed

__all__ = ["ArgFacts", "PipelineStages", "ScriptScan", "Trap", "judge_script_traps", "scan_script"]

CAVEAT = "static analysis of the source: it can be wrong, check the lines named"
DETECTORS = (rank_branch_collectives, sharded_forward_on_one_rank, device_placement, sampler_epochs, same_batches,
             fsdp_rank0_save, same_file_every_rank)


@dataclass(frozen=True, slots=True)
class ScriptScan:
    """The traps found in one script (and the modules it imports), the program's facts, or why it did not parse."""

    path: str
    traps: tuple[Trap, ...]
    resumes: bool | None
    source_lines: Mapping[tuple[str, int], str]
    syntax_error: str | None = None
    facts: ProgramFacts | None = None
    modules: tuple[str, ...] = ()
    """The modules beside the script that were read and followed."""

    def where(self, trap: Trap) -> str:
        """``train.py:42`` or, for a module beside the script, ``utils/train_utils.py:13``."""
        return f"{trap.path or self.path}:{trap.line}"


def scan_script(source: str, path: str, neighbours: Mapping[str, str] | None = None) -> ScriptScan:
    """Parse ``source`` (and ``neighbours``) and look for every trap; a syntax error is kept, never raised."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return ScriptScan(path, (), None, {}, f"line {exc.lineno}: {exc.msg}")
    except ValueError as exc:  # null bytes
        return ScriptScan(path, (), None, {}, str(exc))
    except RecursionError:
        return ScriptScan(path, (), None, {}, "nested too deeply for Python's parser")
    program = Program(tree, source, path, neighbours or {})
    walk = walk_program(program)
    facts = program_facts(program)
    traps: list[Trap] = []
    for detector in DETECTORS:
        traps.extend(detector(walk, facts))
    unique = {(t.path, t.line, t.code): t for t in traps}
    ordered = tuple(sorted(unique.values(), key=lambda t: (t.path, t.line, t.code)))
    lines = {(t.path, t.line): line_text(program.module(t.path or program.script.path).lines, t.line)
             for t in ordered}
    return ScriptScan(path, ordered, resumes_from_checkpoint(walk), lines, facts=facts,
                      modules=tuple(program.modules))


def judge_script_traps(scan: ScriptScan) -> Verdict:
    """WARN per trap found (file:line, the source line, what it costs, how sure); PASS when none is found."""
    if scan.syntax_error:
        return fail("SCRIPT_SYNTAX_ERROR", f"{scan.path} does not parse ({scan.syntax_error}): the job stops at start",
                    f"Fix the syntax error in {scan.path} ({scan.syntax_error}).")
    findings: list[Finding] = []
    for trap in scan.traps:
        text = scan.source_lines.get((trap.path, trap.line), "")
        certainty = "sure" if trap.sure else "likely"
        message = f"{trap.message}; costs: {trap.cost} ({certainty}) [{text}]"
        if trap.status is Status.PASS:
            findings.append(note(trap.code, scan.where(trap), message))
        else:
            findings.append(problem(trap.status, trap.code, scan.where(trap), message, trap.fix))
    beside = f" and {len(scan.modules)} module{'s' if len(scan.modules) != 1 else ''} beside it" if scan.modules \
        else ""
    details = {"script": scan.path, "resumes_from_checkpoint": scan.resumes, "modules": list(scan.modules)}
    if not any(f.status is not Status.PASS for f in findings):
        ok = f"no classic trap found in {scan.path}{beside} (static analysis of the source: it can miss traps)"
        if not findings:
            return passed(ok, details=details)
        return findings_verdict(findings, ok_summary=ok, subject="static scan", details=details)
    return findings_verdict(findings, ok_summary="", subject="static scan", caveat=CAVEAT, details=details)
