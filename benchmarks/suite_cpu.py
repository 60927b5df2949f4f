"""pytest plugin: per-test wall and CPU seconds (this process + waited-for children) into $CPUTIME_OUT.

Use: PYTHONPATH=benchmarks CPUTIME_OUT=/tmp/x.tsv python -m pytest -n auto -p suite_cpu tests
Columns: nodeid, wall s, CPU s, xdist worker, start (epoch s).
Then: sort -t$'\t' -k3 -nr /tmp/x.tsv | head
"""
from __future__ import annotations

import os
import resource
import time
from collections.abc import Generator

import pytest


def _cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    c0, t0, start = _cpu(), time.monotonic(), time.time()
    yield
    out = os.environ.get("CPUTIME_OUT")
    if out:
        with open(out, "a") as f:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            f.write(f"{item.nodeid}\t{time.monotonic() - t0:.2f}\t{_cpu() - c0:.2f}\t{worker}\t{start:.2f}\n")
