"""The plan judges on real public inputs (``tests/data/corpus/manifest.json``): false positives and misses.

Every script, launch line and DeepSpeed config of the corpus is judged as ``preflight --script/--launch/
--ds-config`` judges it, on the manifest's node (8 GPUs of compute capability 9.0, torch 2.13). A
problem (WARN or FAIL) the manifest does not list is a false positive, a listed problem not found is
a false negative; either fails. PASS notes are not problems. ``test_corpus_figures`` prints both
figures (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from preflight.job_plan import script_facts
from preflight.judge.cuda_runtime import GpuCapability
from preflight.judge.ds_config import HostMemory, JobWorld, judge_ds_batch, judge_ds_keys, judge_ds_precision, \
    judge_ds_zero
from preflight.judge.launch_command import LaunchFacts, LaunchNode, ScriptFacts, judge_launch_command
from preflight.judge.script_traps import judge_script_traps, scan_script
from preflight.outcome import Status, Verdict
from preflight.parse.ds_config import read_ds_config
from preflight.parse.ds_config_keys import load_known_keys
from preflight.parse.launch_command import LaunchCommand, parse_launch_command
from preflight.probe.command import run_command
from preflight.probe.job_plan import DEEPSPEED_DEFAULT_HOSTFILE, HostfileFacts, find_module, read_program
from tests.conftest import TEST_DATA, corpus_dir

CORPUS = corpus_dir()  # the files (never committed: third-party code)
MANIFEST: dict[str, Any] = json.loads((TEST_DATA / "corpus" / "manifest.json").read_text())
pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the plan corpus is not at {CORPUS} (PREFLIGHT_CORPUS)")
NODE = MANIFEST["node"]
LAUNCH_NODE = LaunchNode(node_gpus=NODE["gpus"], visible_gpus=NODE["gpus"], visible_var=None, cpus=NODE["cpus"],
                         torch_version=NODE["torch_version"])
GPUS = tuple(GpuCapability(i, "H100", tuple(NODE["compute_capability"])) for i in range(NODE["gpus"]))
HOST = HostMemory(2 * 10**12, 19 * 10**11, None)
PROBLEMS = (Status.WARN, Status.FAIL, Status.ERROR)


@dataclass(frozen=True)
class Score:
    """One input's findings against its truth."""

    name: str
    found: frozenset[str]
    truth: frozenset[str]

    @property
    def false_positives(self) -> frozenset[str]:
        return self.found - self.truth

    @property
    def false_negatives(self) -> frozenset[str]:
        return self.truth - self.found


def problems(verdict: Verdict) -> set[str]:
    """The codes of a verdict's problems (its findings when it has them, else its own code)."""
    findings = verdict.details.get("findings") if isinstance(verdict.details, dict) else None
    if findings is not None:
        return {f["code"] for f in findings if f["status"] in {s.value for s in PROBLEMS}}
    return {verdict.code} if verdict.status in PROBLEMS and verdict.code else set()


@cache
def script_score(index: int) -> Score:
    entry = MANIFEST["scripts"][index]
    source = read_program(str(CORPUS / entry["file"]))
    assert source.text is not None, entry["file"]
    scan = scan_script(source.text, entry["path"], source.neighbours)
    assert scan.syntax_error is None
    judged = judge_script_traps(scan)
    assert judged.status in (Status.PASS, Status.WARN)
    found = frozenset(f"{t.path + ':' if t.path else ''}{t.line}:{t.code}" for t in scan.traps
                      if t.status in PROBLEMS)
    truth = frozenset(f"{p['line']}:{p['code']}" for p in entry["problems"])
    return Score(entry["file"], found, truth)


def launch_facts(entry: dict[str, Any], command: LaunchCommand) -> LaunchFacts:
    """The launch's facts as the plan fixtures gather them, from the corpus folder the line runs in."""
    cwd = CORPUS / entry["cwd"]
    script = ScriptFacts(None, None, None)
    if entry["script_in_corpus"] and not command.runs_module:
        source = read_program(command.script, cwd)
        assert source.text is not None, f"{entry['id']}: {command.script} is not in the corpus"
        scan = scan_script(source.text, command.script, source.neighbours)
        script = script_facts(command.script, scan, cwd)
    module = None
    if command.runs_module:
        module = find_module(command.script, python=sys.executable, run=run_command,
                             environ={**os.environ, **command.env}, cwd=cwd)
    hostfile = None
    if command.launcher == "deepspeed":
        given = command.option("hostfile")
        text = entry["hostfile"]
        path = str(cwd / str(given)) if given else DEEPSPEED_DEFAULT_HOSTFILE
        hostfile = HostfileFacts(path, given is not None, text not in (None, "absent"),
                                 text if text not in (None, "absent") else None)
    return LaunchFacts(script, module, hostfile)


@cache
def launch_score(index: int) -> Score:
    entry = MANIFEST["launches"][index]
    command = parse_launch_command(entry["command"])
    verdict = judge_launch_command(command, LAUNCH_NODE, launch_facts(entry, command))
    return Score(entry["id"], frozenset(problems(verdict)), frozenset(entry["problems"]))


@cache
def config_score(index: int) -> Score:
    entry = MANIFEST["configs"][index]
    config = read_ds_config(CORPUS / entry["file"])
    stages = entry["pipeline_stages"]
    world = JobWorld(entry["ranks"], f"{entry['ranks']} visible GPUs", stages, "manifest" if stages else "")
    found: set[str] = set()
    for verdict in (judge_ds_batch(config, world), judge_ds_precision(config, GPUS),
                    judge_ds_zero(config, fit=None, ranks=entry["ranks"], host=HOST),
                    judge_ds_keys(config, load_known_keys(), "0.19.8")):
        found |= problems(verdict)
    return Score(entry["file"], frozenset(found), frozenset(entry["problems"]))


def test_the_corpus_is_large_enough_and_every_file_is_there() -> None:
    assert len(MANIFEST["scripts"]) >= 25 and len(MANIFEST["launches"]) >= 20
    for entry in (*MANIFEST["scripts"], *MANIFEST["configs"]):
        assert (CORPUS / entry["file"]).is_file(), entry["file"]
        assert entry["repo"] in MANIFEST["sources"] and len(entry["commit"]) == 40
    for source in MANIFEST["sources"].values():
        assert source["licence_file"] is None or (CORPUS / source["licence_file"]).is_file()


@pytest.mark.parametrize("index", range(len(MANIFEST["scripts"])),
                         ids=[Path(e["file"]).name + f"[{i}]" for i, e in enumerate(MANIFEST["scripts"])])
def test_script(index: int) -> None:
    score = script_score(index)
    assert not score.false_positives and not score.false_negatives, (
        f"{score.name}: false positives {sorted(score.false_positives)}, missed {sorted(score.false_negatives)}")


@pytest.mark.parametrize("index", range(len(MANIFEST["launches"])), ids=[e["id"] for e in MANIFEST["launches"]])
def test_launch(index: int) -> None:
    score = launch_score(index)
    assert not score.false_positives and not score.false_negatives, (
        f"{score.name}: false positives {sorted(score.false_positives)}, missed {sorted(score.false_negatives)}")


@pytest.mark.parametrize("index", range(len(MANIFEST["configs"])),
                         ids=[Path(e["file"]).name for e in MANIFEST["configs"]])
def test_config(index: int) -> None:
    score = config_score(index)
    assert not score.false_positives and not score.false_negatives, (
        f"{score.name}: false positives {sorted(score.false_positives)}, missed {sorted(score.false_negatives)}")


def test_corpus_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """The figures for the note: inputs, real problems, false positives and false negatives per kind."""
    lines = []
    total_fp = total_fn = 0
    for kind, count, score in (("scripts", len(MANIFEST["scripts"]), script_score),
                               ("launch lines", len(MANIFEST["launches"]), launch_score),
                               ("DeepSpeed configs", len(MANIFEST["configs"]), config_score)):
        scores = [score(i) for i in range(count)]
        fp = sum(len(s.false_positives) for s in scores)
        fn = sum(len(s.false_negatives) for s in scores)
        real = sum(len(s.truth) for s in scores)
        clean = sum(1 for s in scores if not s.truth)
        total_fp, total_fn = total_fp + fp, total_fn + fn
        lines.append(f"{kind}: {count} ({clean} correct, {real} real problems): {fp} false positives, "
                     f"{fn} false negatives")
    with capsys.disabled():
        print("\ncorpus: " + "; ".join(lines))
    assert total_fp == 0 and total_fn == 0
