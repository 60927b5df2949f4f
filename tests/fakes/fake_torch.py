"""A fake of the job's torch at the command layer: the torch probe's answer on a CUDA node.

preflight asks the job's interpreter to run ``.../torch_child.py`` (``torch_probe_argv``) and reads one JSON line. On a
node without GPUs the tests answer that command as the child would on a GPU node, and pass every
other command to the real runner. The answer's shape is the real child's (it is run here and its
output edited): ``version``/``cuda``/``nccl``/``arch_list`` are those of the torch 2.4.1+cu124 wheel
(torch/version.py ``cuda = '12.4'``; ``torch.cuda.nccl.version()`` is ``(2, 20, 5)``;
``torch._C._cuda_getArchFlags()`` lists sm_50 to sm_90), ``device_count`` is what
``torch.cuda.device_count()`` answers from NVML before CUDA is initialised.

    -p tests.fakes.fake_torch --fake-torch-gpus=2
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import pytest

from preflight.node.torch import CHILD, torch_probe_argv
from preflight.node.transports import Transports
from preflight.probe.command import DEFAULT_TIMEOUT_S, CommandResult, CommandRunner, run_command
from tests.fakes.replayed_torch import replaying

CUDA_ARCHES = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


@lru_cache(maxsize=1)
def real_answer() -> dict[str, Any]:
    """The real child's answer on this machine (CPU torch), recorded once for the session (``replayed_torch``)."""
    out = replaying(run_command)(torch_probe_argv(sys.executable), timeout_s=120.0)
    if not out.ok:
        raise RuntimeError(f"the torch probe failed on this machine: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def cuda_answer(gpus: int) -> dict[str, Any]:
    """The answer of a torch 2.4.1+cu124 that sees ``gpus`` GPUs."""
    answer = dict(real_answer())
    answer.update({"version": "2.4.1+cu124", "cuda": "12.4", "hip": None, "arch_list": CUDA_ARCHES,
                   "nccl": [2, 20, 5], "nccl_suffix": "", "device_count": gpus})
    return answer


def torch_runner(answer: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
                 passthrough: CommandRunner = run_command) -> CommandRunner:
    """A runner that answers the torch probe with ``answer`` (or what the callable gives, when the probe
    runs) and runs everything else for real."""

    def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if argv and str(argv[-1]) == str(CHILD):
            given = answer() if callable(answer) else answer
            return CommandResult(tuple(argv), 0, json.dumps(dict(given)) + "\n", "")
        return passthrough(argv, timeout_s, env)

    return run


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fake-torch-gpus", type=int, default=None, help="the job's torch sees N GPUs (CUDA build)")


def pytest_preflight_transports(config: pytest.Config) -> Transports | None:
    gpus = config.getoption("fake_torch_gpus")
    if gpus is None:
        return None
    return Transports(run=torch_runner(cuda_answer(gpus)))
