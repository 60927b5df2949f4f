"""What the sub-commands answer on every shared capture, recorded once and compared afterwards.

``python -m tests.capture_regressions`` (re)writes ``tests/data/regression/<command>.json`` from
the current code: per capture, the exit code, stdout (parsed when it is JSON) and stderr of
``preflight nccl-log FILE``, ``preflight nccl-log FILE --json``, ``preflight topology FILE`` and
``preflight topology FILE --json``. ``tests/test_capture_regressions.py`` runs the same commands
and compares, so a parser change that alters an answer shows up as a diff of these files.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from preflight.cli import main
from tests.conftest import TEST_DATA, shared_fixtures_dir

GOLDEN = TEST_DATA / "regression"
SUITES = {"nccl-log": ("nccl_logs", "nccl_tests"), "topology": ("topo",)}


def captures(command: str, root: Path | None = None) -> list[str]:
    """``nccl_logs/NAME.txt`` style names of the shared captures a command is recorded on."""
    root = root or shared_fixtures_dir()
    return [f"{folder}/{p.name}" for folder in SUITES[command] if (root / folder).is_dir()
            for p in sorted((root / folder).iterdir()) if p.is_file()]


def answer(command: str, path: Path, name: str, as_json: bool) -> dict[str, Any]:
    """Exit code, stdout and stderr of one in-process run, with the absolute path replaced by ``name``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([command, str(path), *(["--json"] if as_json else [])])
    stdout = out.getvalue().replace(str(path), name)
    return {"exit_code": code, "stdout": json.loads(stdout) if as_json and code == 0 else stdout,
            "stderr": err.getvalue().replace(str(path), name)}


def record(command: str, root: Path | None = None) -> dict[str, Any]:
    """Every capture's text and JSON answer."""
    root = root or shared_fixtures_dir()
    return {name: {"text": answer(command, root / name, name, False), "json": answer(command, root / name, name, True)}
            for name in captures(command, root)}


def golden_path(command: str) -> Path:
    return GOLDEN / f"{command}.json"


if __name__ == "__main__":
    for command in SUITES:
        data = record(command)
        golden_path(command).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"{golden_path(command)}: {len(data)} captures", file=sys.stderr)
