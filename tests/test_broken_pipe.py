"""``preflight ... | head``: a reader that leaves early ends the command quietly, as SIGPIPE ends
``cat``, never with a BrokenPipeError traceback.

The pipe's read end is closed before the child starts, so its very first write fails with EPIPE
(Python ignores SIGPIPE and raises BrokenPipeError): the test does not depend on how much ``head``
would have read or on timing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from preflight.cli import EXIT_BROKEN_PIPE, subcommands
from tests.conftest import REPO_ROOT, TEST_DATA

pytestmark = pytest.mark.e2e

TOPOLOGY = TEST_DATA / "topo" / "own" / "16-gpu-nvswitch-two-digit-names.txt"
NCCL_LOG = TEST_DATA / "nccl" / "nvls-8-ranks-p2p-cumem-setup.log"


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m preflight ARGS`` with stdout a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run([sys.executable, "-m", "preflight", *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        ("topology", "--json", str(TOPOLOGY)),
        ("topology", str(TOPOLOGY)),
        ("nccl-log", "--json", str(NCCL_LOG)),
        ("nccl-log", str(NCCL_LOG)),
        ("size", "--model-params", "7B", "--gpus", "8", "--gpu-memory", "80GiB"),
        ("--help",),
        *((name, "--help") for name in sorted(subcommands())),
    ],
    ids=lambda args: " ".join(a if "/" not in a else os.path.basename(a) for a in args),
)
def test_a_reader_that_leaves_ends_the_command_quietly(args: tuple[str, ...]) -> None:
    result = into_closed_pipe(*args)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.stderr == ""
    # argparse's --help swallows the failed write itself (``_print_message``) and exits 0
    assert result.returncode == (0 if "--help" in args else EXIT_BROKEN_PIPE)
