"""Measure the wall time of ``preflight`` and where it goes: start-up, each check, report writing.

Usage: python benchmarks/wall_time.py [--runs N] [-- preflight options...]

Start-up is the time from process start to the first check (imports, option parsing, collection);
each check's time comes from the report; report writing from the line log's finish record; the
rest is interpreter exit. Figures are printed per run and as a median."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launch_ratio import has_gpu  # benchmarks/ is the script's own folder on sys.path


def one_run(extra: list[str]) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="preflight-bench-"))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "preflight", "--report-dir", str(out), *extra],
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    report = json.loads((out / "preflight.json").read_text())
    finish = json.loads((out / "preflight.jsonl").read_text().splitlines()[-1])
    figures = {"wall_s": wall, "startup_s": report["run"]["startup_s"] or 0.0,
               "report_write_s": finish.get("report_write_s", 0.0), "exit_code": proc.returncode}
    for check in report["checks"]:
        figures[f"check:{check['id']}"] = check["duration_s"]
    accounted = figures["startup_s"] + figures["report_write_s"] + sum(
        v for k, v in figures.items() if k.startswith("check:"))
    figures["other_s"] = wall - accounted
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    if "--cpu" not in extra and not has_gpu():
        extra = ["--cpu", *extra]  # no GPU here: time the CPU rehearsal
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    runs = [one_run(extra) for _ in range(args.runs)]
    keys = list(runs[0])
    for key in keys:
        values = [r.get(key, 0.0) for r in runs]
        print(f"{key:60s} median {statistics.median(values):8.3f}  runs " + " ".join(f"{v:.3f}" for v in values))


if __name__ == "__main__":
    main()
