"""``preflight size``: the table, the JSON shape, and exit-code-2 errors for bad sizes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from preflight.commands.size import main
from preflight.errors import UsageError


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_table_for_7b_on_8x80gb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model-params", "7B", "--gpus", "8", "--gpu-memory", "80GB"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:3] in ("DDP", "ZeR", "FSD")}
    assert "126.00 GB" in rows["DDP"] and " no " in rows["DDP"]
    assert "52.50 GB" in rows["ZeRO-1"] and " yes " in rows["ZeRO-1"]
    assert "18.55 GB" in rows["ZeRO-3"]
    assert "Recommended: ZeRO-1" in out
    assert "assumes a largest layer of 700M parameters" in out


def test_json_has_one_entry_per_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--model-params", "70B", "--gpus", "8", "--gpu-memory", "80GB")
    strategies = data["strategies"]
    assert isinstance(strategies, list)
    assert [s["name"] for s in strategies] == ["ddp", "zero1", "zero2", "zero3", "fsdp"]
    for entry in strategies:
        assert isinstance(entry["bytes_per_gpu"], int) and isinstance(entry["fits"], bool)
    assert strategies[0]["bytes_per_gpu"] == 1_260_000_000_000
    assert not any(s["fits"] for s in strategies)
    assert data["gpus_needed"] == {"strategy": "fsdp", "gpus": 21}


def test_options_change_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys, "--model-params", "7e9", "--gpus", "8", "--gpu-memory", "81559MiB",
        "--bytes-per-param", "16", "--largest-layer-params", "131072000", "--headroom", "10GB",
    )
    assert data["bytes_per_param"]["total"] == 16.0
    assert data["available_bytes_per_gpu"] == 81559 * 2**20 - 10**10
    assert data["strategies"][0]["bytes_per_gpu"] == 112 * 10**9
    assert data["largest_layer_params"] == 131_072_000


def test_one_gpu_small_model_recommends_ddp(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--model-params", "125M", "--gpus", "1", "--gpu-memory", "24GiB")
    assert data["recommended"] == "ddp"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-params", "-3B"], "greater than zero"),
        (["--model-params=-3B"], "greater than zero"),
        (["--model-params", "seven"], "not a number"),
        (["--model-params", "1e400"], "more than 10\\^15"),
        (["--model-params", "nan"], "not a number"),
        (["--model-params", "0"], "greater than zero"),
        (["--model-params", ""], "empty"),
        (["--model-params", "7B", "--gpus", "0"], "at least 1"),
        (["--model-params", "7B", "--gpus", "two"], "not a whole number"),
        (["--model-params", "7B", "--gpu-memory", "80"], "needs a unit"),
        (["--model-params", "7B", "--gpu-memory", "-80GB"], "greater than zero"),
        (["--model-params", "7B", "--bytes-per-param", "-16"], "negative"),
        (["--model-params", "7B", "--headroom", "150%"], "below 100%"),
        (["--model-params", "7B", "--largest-layer-params", "8B"], "largest layer"),
    ],
)
def test_bad_input_is_a_usage_error(argv: list[str], message: str) -> None:
    defaults = {"--gpus": "8", "--gpu-memory": "80GB"}
    full = list(argv)
    for option, value in defaults.items():
        if not any(a == option or a.startswith(option + "=") for a in argv):
            full += [option, value]
    with pytest.raises(UsageError, match=message):
        main(full)


def test_missing_required_option_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--gpu-memory"):
        main(["--model-params", "7B", "--gpus", "8"])
