"""Programs on disk for the deploy recipe tests: the real ``preflight`` of this checkout, a canned
stand-in for a run, and a ``kubectl`` that only records what it was asked to do."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def real_preflight(where: Path) -> Path:
    """``preflight`` as a program on disk: this checkout's package under this interpreter."""
    return executable(where / "preflight", f"#!/bin/sh\nPYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}} "
                      f"exec {sys.executable} -m preflight \"$@\"\n")


def fake_preflight(where: Path, report: dict[str, Any] | None, code: int) -> Path:
    """A stand-in for the run (writes ``report`` into --report-dir, exits ``code``); the
    ``preflight report`` sub-command stays the real one."""
    source = where / "canned.json"
    if report is not None:
        source.write_text(json.dumps(report))
    copy = f'cp {source} "$dir/preflight.json"' if report is not None else "true"
    return executable(where / "preflight", f"""#!/bin/sh
if [ "$1" = report ]; then PYTHONPATH={REPO_ROOT} exec {sys.executable} -m preflight "$@"; fi
echo "$@" >"{where}/preflight.argv"
while [ $# -gt 0 ]; do [ "$1" = --report-dir ] && dir=$2; shift; done
mkdir -p "$dir" && {copy}
exit {code}
""")


def fake_kubectl(where: Path) -> Path:
    """``kubectl`` that appends its arguments (one call per line, tab-separated) to ``kubectl.calls``."""
    return executable(where / "kubectl", f"""#!/bin/sh
printf '%s\\t' "$@" >>"{where}/kubectl.calls"
printf '\\n' >>"{where}/kubectl.calls"
""")


def kubectl_calls(where: Path) -> list[list[str]]:
    path = where / "kubectl.calls"
    if not path.exists():
        return []
    return [line.rstrip("\t").split("\t") for line in path.read_text().splitlines()]
