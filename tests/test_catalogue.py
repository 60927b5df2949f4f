"""The code catalogue covers every code the source can emit, and nothing else; `preflight explain`
and the generated table (docs/codes.md) show it."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from preflight.codes import DEFAULT_KIND, Kind, areas, catalogue, close_matches, iter_codes, kind_of, lookup
from preflight.codes.markdown import catalogue_markdown
from preflight.commands import explain
from preflight.judge.strategies import STRATEGIES
from preflight.outcome import CODE_PATTERN
from tests.code_scan import ROOT, Use, code_uses
from tests.test_cli import preflight

# The values each f-string placeholder takes, per file: the judges build these codes from the
# strategy names (ddp.judge_launch_failure runs for DDP and, through judge_strategy_failure, for
# every strategy test_strategies parametrizes; judge_strategy runs for STRATEGIES[1:]).
TEMPLATE_VALUES: dict[tuple[str, str], tuple[str, ...]] = {
    ("preflight/judge/ddp.py", "what.upper()"): tuple(name.upper() for name in STRATEGIES),
    ("preflight/judge/strategies.py", "prefix"): tuple(name.upper() for name in STRATEGIES[1:]),
    ("preflight/judge/strategies.py", "what.upper()"): ("SAVE", "LOAD"),
}


def expand(use: Use) -> set[str]:
    """The concrete codes a template stands for, from TEMPLATE_VALUES (KeyError: a new placeholder)."""
    names = re.findall(r"\{([^{}]*)\}", use.code)
    choices = [TEMPLATE_VALUES[(use.path, name)] for name in names]
    out = set()
    for values in itertools.product(*choices):
        code = use.code
        for name, value in zip(names, values, strict=True):
            code = code.replace("{" + name + "}", value, 1)
        out.add(code)
    return out


@pytest.fixture(scope="module")
def used() -> dict[str, list[Use]]:
    """Every concrete code the source can emit -> where."""
    found: dict[str, list[Use]] = {}
    for use in code_uses():
        if use.template:
            missing = [name for name in re.findall(r"\{([^{}]*)\}", use.code) if (use.path, name) not in
                       TEMPLATE_VALUES]
            assert not missing, (f"{use.path}:{use.line} builds codes from {missing}: add the values they take to "
                                 "TEMPLATE_VALUES and their entries to preflight/codes/")
            codes = expand(use)
        else:
            codes = {use.code}
        for code in codes:
            found.setdefault(code, []).append(use)
    return found


def test_every_code_used_is_catalogued(used: dict[str, list[Use]]) -> None:
    known = catalogue()
    missing = {code: f"{uses[0].path}:{uses[0].line}" for code, uses in used.items() if code not in known}
    assert not missing, f"codes without a catalogue entry in preflight/codes/ (then regenerate docs/codes.md): {missing}"


def test_no_catalogue_entry_is_dead(used: dict[str, list[Use]]) -> None:
    dead = sorted(set(catalogue()) - set(used))
    assert not dead, f"catalogue entries no code of preflight/ or checks/ uses: {dead}"


def test_the_codes_in_use_are_many_and_well_formed(used: dict[str, list[Use]]) -> None:
    assert len(used) >= 200  # 175 literal codes and 10 templates (46 codes) on 2026-12-01
    assert all(CODE_PATTERN.match(code) for code in used), sorted(c for c in used if not CODE_PATTERN.match(c))
    for code in ("NO_NVIDIA_GPU", "CHECK_ERROR", "RUN_INTERRUPTED", "GPU_IN_USE", "CUDA_TOOLKIT_MISSING",
                 "NVML_DRIVER_NOT_LOADED", "TOPOLOGY_PCIE_ONLY", "REHEARSAL_OOM", "ZERO3_CHECKPOINT_SAVE_HUNG",
                 "DDP_RANK_HUNG", "FSDP_RANK_CRASHED", "DS_BATCH_DERIVED", "SCRIPT_SAVE_ON_ONE_RANK"):
        assert code in used, code


def test_the_scanner_follows_every_way_a_code_is_written(tmp_path: Path) -> None:
    """A code added any of the ways the judges write them is found (so the coverage test can fail)."""
    judge = tmp_path / "preflight" / "judge"
    judge.mkdir(parents=True)
    (tmp_path / "checks").mkdir()
    (tmp_path / "preflight" / "__init__.py").write_text("")
    (judge / "__init__.py").write_text("")
    (judge / "consts.py").write_text('IMPORTED = "A_IMPORTED"\n')
    (judge / "new.py").write_text(textwrap.dedent('''
        from preflight.judge.consts import IMPORTED
        from preflight.outcome import error, fail, warn, Verdict
        from preflight.judge.findings import note, problem
        LOCAL = "A_MODULE_CONSTANT"
        KEPT_CODE = "A_NAMED_CODE"
        CAUSES = {1: ("A_TUPLE_FIRST", "cause", "fix")}

        def judge(x, what):
            act = fail if x else warn
            act("A_ALIAS", "s", "r")
            verdict, why = (fail, "a") if x else (warn, "b")
            verdict("A_TUPLE_ALIAS", "s", "r")
            code = {1: "A_DICT_VALUE"}.get(x, "A_DICT_DEFAULT")
            warn(code, "s", "r")
            fail("A_IFEXP" if x else "B_IFEXP", "s", "r")
            error("s")
            error("s", code=LOCAL)
            Verdict(status=None, summary="s", code=IMPORTED)
            problem(None, "A_FINDING", "where", "m", "f")
            note("A_NOTE", "where", "m")
            fail(f"{what.upper()}_TEMPLATE", "s", "r")
            known = CAUSES.get(x)
            raise NvmlUnavailableError(*known)

        def wrapped(x):
            def problem(code, summary):
                return fail(code, summary, "fix")
            return problem("A_WRAPPED", "s")
    '''))
    found = {use.code for use in code_uses(tmp_path)}
    assert found == {"A_IMPORTED", "A_MODULE_CONSTANT", "A_NAMED_CODE", "A_TUPLE_FIRST", "A_ALIAS", "A_TUPLE_ALIAS",
                     "A_DICT_VALUE", "A_DICT_DEFAULT", "A_IFEXP", "B_IFEXP", "CHECK_ERROR", "A_FINDING", "A_NOTE",
                     "A_WRAPPED", "{what.upper()}_TEMPLATE"}


def test_entries_say_what_why_and_fix() -> None:
    for area in areas():
        assert area.codes, area.title
        for entry in area.codes:
            assert CODE_PATTERN.match(entry.code), entry.code
            for text in (entry.meaning, entry.why, entry.fix):
                assert len(text) >= 12 and text == text.strip() and "\n" not in text, (entry.code, text)


def test_every_entry_has_a_class_and_the_classes_order_the_problems() -> None:
    """Each code says where its problems are listed (``Kind``); an entry added without one is named here."""
    unclassified = [entry.code for _, entry in iter_codes() if entry.kind is None]
    assert not unclassified, (f"classify these codes with kind=Kind.X (rules: preflight/codes/__init__.py): "
                              f"{unclassified}")
    assert [kind.rank for kind in Kind] == list(range(len(Kind)))
    assert kind_of("GPU_ROW_REMAP_FAILED") is Kind.RMA
    assert {kind_of(c) for c in ("GPU_ECC_UNCORRECTABLE", "GPU_ROW_REMAP_PENDING", "NVLINK_ALL_DOWN")} == {Kind.HARDWARE}
    assert kind_of("DEEPSPEED_CUDA_MAJOR_MISMATCH") is kind_of("TORCH_CPU_BUILD") is Kind.BLOCKER
    assert kind_of("NCCL_BUSBW_LOW") is kind_of("SESSION_NOT_DETACHED") is Kind.COST
    assert kind_of("DS_AUTO") is Kind.NOTE and "A note, not a problem" in getattr(lookup("DS_AUTO"), "meaning", "")
    assert kind_of("NOT_A_CODE") is kind_of(None) is DEFAULT_KIND is Kind.BLOCKER
    notes = [entry.code for _, entry in iter_codes() if ("A note, not a problem" in entry.meaning) !=
             (entry.kind is Kind.NOTE) and entry.code != "LAUNCH_MULTI_NODE"]
    assert not notes, notes


def test_lookup_and_close_matches() -> None:
    assert lookup(" gpu_ecc_uncorrectable ") is lookup("GPU_ECC_UNCORRECTABLE") is not None
    assert lookup("NOPE") is None
    assert close_matches("GPU_ROW_REMAP") == ["GPU_ROW_REMAP_FAILED", "GPU_ROW_REMAP_PENDING"]
    assert close_matches("NCCL_BUSBW_LOOW")[0] == "NCCL_BUSBW_LOW"
    assert close_matches("XYZZY") == []


def test_the_committed_table_is_the_generated_one() -> None:
    committed = (ROOT / "docs" / "codes.md").read_text(encoding="utf-8")
    assert committed == catalogue_markdown(), "regenerate it: preflight explain --markdown > docs/codes.md"
    rows = [line for line in committed.splitlines() if line.startswith("| `")]
    assert len(rows) == len(catalogue())


def test_the_readme_links_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/codes.md" in readme and "preflight explain" in readme


def test_explain_prints_what_why_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain.main(["gpu_row_remap_pending", "ZERO2_OP_BUILD_FAILED"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU_ROW_REMAP_PENDING  (GPUs, NVML and the job's torch; hardware fault)")
    assert "ZERO2_OP_BUILD_FAILED" in out
    for label in ("what:", "why:", "fix:"):
        assert out.count(f"  {label}") == 2
    assert all(len(line) <= explain.MAX_WIDTH for line in out.splitlines())


def test_explain_list_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain.main(["--list"]) == 0  # captured: not a terminal, so one whole line a code
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [code for code in catalogue()]
    assert [line.split(None, 1)[1] for line in lines] == [entry.meaning for _, entry in iter_codes()]  # never cut
    for width in (72, 120):  # a terminal: wrapped, still whole
        wrapped = explain.list_lines(width)
        assert len(wrapped) == len(lines) and all(len(row) <= width for text in wrapped for row in text.splitlines())
        assert [" ".join(text.split()) for text in wrapped] == [" ".join(line.split()) for line in lines]
    assert explain.main(["--json", "NCCL_BUSBW_LOW"]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["code"] == "NCCL_BUSBW_LOW" and set(entry) == {"code", "area", "kind", "meaning", "why", "fix"}
    assert entry["kind"] == "cost"
    assert explain.main(["--list", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(catalogue())


@pytest.mark.e2e
def test_explain_unknown_code_is_one_line_and_exit_2() -> None:
    result = preflight("explain", "GPU_ROW_REMAP")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("preflight: error: unknown code 'GPU_ROW_REMAP'; did you mean GPU_ROW_REMAP_FAILED, "
                             "GPU_ROW_REMAP_PENDING?\n")
    result = preflight("explain")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


@pytest.mark.e2e
def test_explain_into_a_closed_pipe_is_quiet() -> None:
    # The Markdown (72 kB) is more than a pipe holds (64 kB), so the write meets the closed end.
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'preflight', 'explain', '--markdown'], "
            "stdout=subprocess.PIPE, stderr=subprocess.PIPE); p.stdout.readline(); p.stdout.close(); "
            "print(p.wait(timeout=60)); sys.stdout.write(p.stderr.read().decode())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.stdout.splitlines()[0] == "0"
    assert "Traceback" not in result.stdout
