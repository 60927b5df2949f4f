"""``--strategy``: parsing, the default with and without DeepSpeed, and skipping what is not selected."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from preflight.launch import strategy_phases as module
from preflight.launch.strategy_phases import StrategySelection, selected_strategies
from preflight.option_types import parse_strategies, strategy_option
from preflight.node.transports import Transports
from preflight.report.ownership import LOGS, OWNED_MARK


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("fsdp", ("fsdp",)),
        ("ddp,zero2", ("ddp", "zero2")),
        (" FSDP , ddp ", ("fsdp", "ddp")),
        ("zero3,zero3", ("zero3",)),
        ("all", ("ddp", "fsdp", "zero1", "zero2", "zero3")),
        ("fsdp,all", ("ddp", "fsdp", "zero1", "zero2", "zero3")),
    ],
)
def test_names_and_comma_lists_parse(text: str, names: tuple[str, ...]) -> None:
    assert parse_strategies(text) == names
    assert strategy_option(text) == ",".join(names)
    assert parse_strategies(strategy_option(text)) == names  # the joined value reads back the same


@pytest.mark.parametrize(("text", "message"), [("zero4", "unknown strategy 'zero4'; expected ddp, fsdp, zero1"),
                                               (",", "expected a strategy name"), ("", "expected a strategy name")])
def test_bad_names_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        strategy_option(text)


def test_the_default_adds_zero_only_when_deepspeed_is_installed() -> None:
    assert selected_strategies(None, None) == ("ddp", "fsdp")
    assert selected_strategies([], "0.16.4") == ("ddp", "fsdp", "zero1", "zero2", "zero3")


def test_repeated_options_add_up_in_a_fixed_order() -> None:
    assert selected_strategies(["zero2", "fsdp,ddp"], None) == ("ddp", "fsdp", "zero2")


def test_deepspeed_is_found_by_its_metadata_without_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.16.4" if name == "deepspeed" else "1")
    assert module.job_deepspeed(Transports()) == "0.16.4"

    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    assert module.job_deepspeed(Transports()) is None


def test_the_jobs_own_interpreter_is_asked_where_it_is_another(tmp_path: Path) -> None:
    """``--python``: the job's DeepSpeed, not preflight's (issue 24), from its metadata alone (no import)."""
    site = tmp_path / "site"
    (site / "deepspeed-9.9.9.dist-info").mkdir(parents=True)
    (site / "deepspeed-9.9.9.dist-info" / "METADATA").write_text("Name: deepspeed\nVersion: 9.9.9\n")
    python = tmp_path / "python"  # another interpreter (this one, by another name) whose path has that DeepSpeed
    python.symlink_to(sys.executable)
    found = module.job_deepspeed(Transports(python=str(python), environ={"PYTHONPATH": str(site)}))
    assert found == "9.9.9"  # PYTHONPATH comes first on the job's sys.path, and the probe keeps it


def test_a_strategy_not_selected_skips_its_check_with_the_way_to_add_it() -> None:
    selection = StrategySelection(("ddp",), explicit=True)
    assert "ddp" in selection and "fsdp" not in selection
    selection.require("ddp")
    with pytest.raises(pytest.skip.Exception, match=r"strategy fsdp not selected \(--strategy selects ddp\); add "
                       r"--strategy fsdp"):
        selection.require("fsdp")


CHECKS_UNDER_TEST = '''
from checks.test_strategies import *  # noqa: F403 - this checkout's check, run inline
'''


def test_the_check_skips_unselected_and_unavailable_strategies_without_launching(pytester: pytest.Pytester) -> None:
    """ZeRO-2 is selected but the quick profile leaves it out (no op build, no launch), FSDP2 is not selected."""
    pytester.makepyfile(test_inline=CHECKS_UNDER_TEST)
    out = pytester.path / "out"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--preflight-report-dir={out}", "--preflight-cpu",
                                "--preflight-strategy=ddp,zero2", "--preflight-profile=quick", "-rs")
    result.assert_outcomes(skipped=5)  # four strategy steps and the op build check
    text = result.stdout.str()
    assert "strategy fsdp not selected (--strategy selects ddp, zero2)" in text
    assert "ZeRO-2 is not rehearsed in the quick profile" in text
    assert [p.name for p in (out / LOGS).iterdir()] == [OWNED_MARK]  # nothing was launched
