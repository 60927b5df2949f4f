"""The run's settings: one declaration per option feeding both parsers, one typed field each, defaults once."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from preflight import plugin
from preflight.cli import build_parser, settings_from
from preflight.errors import UsageError
from preflight.judge.memory_fit import DEFAULT_HEADROOM
from preflight.judge.sizing import BytesPerParam
from preflight.parse.quantity import QuantityError
from preflight.settings import OPTIONS, Settings

ARGV = ["--nproc", "3", "--timeout", "120", "--cpu", "--strategy", "ddp,fsdp", "--strategy", "zero2",
        "--with", "deepspeed", "--model-params", "7B", "--headroom", "10GiB", "--lora-rank", "8",
        "--hidden-size", "4096", "--num-layers", "32", "--expect-busbw", "150", "--profile", "quick"]


def test_every_option_is_one_typed_field_and_every_field_an_option() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)} - {"started"}
    attributes = [option.attribute for option in OPTIONS]
    assert len(attributes) == len(set(attributes))
    assert set(attributes) == fields
    assert not hasattr(Settings, "option") and not hasattr(Settings, "options")


def test_an_option_not_given_takes_its_declared_default() -> None:
    settings = Settings.from_options({})
    assert settings.report_dir == Path("reports").resolve() and settings.profile == "full"
    assert settings.timeout_s == 300.0 and settings.nvml_timeout_s == 60.0 and settings.jit_build_timeout_s == 600.0
    assert settings.op_build_timeout_s == 600.0 and settings.python == sys.executable
    assert settings.bytes_per_param == BytesPerParam() and settings.headroom == DEFAULT_HEADROOM
    assert settings.strategies == () and settings.frameworks == () and not settings.cpu and not settings.slow
    assert settings.nproc is None and settings.model_params is None and settings.launch is None
    assert settings.lora() is None


def _pytest_settings(argv: list[str]) -> Settings:
    """What the plugin builds under pytest alone, from ``--preflight-NAME`` (its own parse of the same
    declarations)."""
    parser = pytest.Parser(_ispytest=True)
    plugin.pytest_addoption(parser)
    spelled = [f"--preflight-{a[2:]}" if a.startswith("--") else a for a in argv]
    namespace = parser.parse(spelled)
    return Settings.from_options({o.dest: getattr(namespace, f"preflight_{o.dest}") for o in OPTIONS})


def test_the_cli_and_pytest_alone_build_the_same_settings() -> None:
    cli = settings_from(build_parser().parse_args(ARGV))
    alone = _pytest_settings(ARGV)
    assert cli.with_(started=0.0) == alone.with_(started=0.0)
    assert cli.nproc == 3 and cli.timeout_s == 120.0 and cli.cpu and cli.quick
    assert cli.strategies == ("ddp,fsdp", "zero2") and cli.frameworks == ("deepspeed",)
    assert cli.headroom.absolute_bytes == 10 * 2**30 and cli.expect_busbw == 150.0
    lora = cli.lora()
    assert lora is not None and lora.trainable_params == 2 * 8 * 2 * 4096 * 32


def test_the_report_shows_every_option_with_the_value_the_run_used() -> None:
    options = settings_from(build_parser().parse_args(["--nproc", "2"])).as_options()
    assert list(options) == [option.dest for option in OPTIONS]
    assert options["nproc"] == 2 and options["timeout"] == 300.0 and options["with"] == ()


def test_a_lora_combination_without_the_model_is_refused_when_the_settings_are_built() -> None:
    with pytest.raises(QuantityError, match="give --model-params too"):
        Settings.from_options({"lora_rank": 8})
    with pytest.raises(UsageError, match="give --model-params too"):
        settings_from(build_parser().parse_args(["--lora-rank", "8"]))


def test_settings_are_frozen_and_with_makes_a_copy() -> None:
    settings = Settings.from_options({"timeout": 10.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.timeout_s = 20.0  # type: ignore[misc]
    later = settings.with_(started=settings.started + 5)
    assert later.timeout_s == 10.0 and later.remaining_s() > settings.remaining_s()
