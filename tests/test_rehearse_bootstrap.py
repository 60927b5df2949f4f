"""The rehearsal bootstrap's step counting, in-process with real torch optimizers: one step per
training iteration whatever the optimizer calls look like, and the stop at the step after the
last measured one. Its exit (``os._exit``) is replaced by an exception here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from preflight.rehearse import bootstrap
from tests.conftest import REPO_ROOT


class Left(BaseException):
    """Raised instead of os._exit (BaseException: the hook's own error guard must not swallow it)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _raise_left(code: int) -> None:
    raise Left(code)


@pytest.fixture
def counting(tmp_path, monkeypatch):
    """A StepCounter of 1 warm-up + 3 measured steps with its post hook registered globally."""
    monkeypatch.setattr(bootstrap, "_leave", _raise_left)
    state = bootstrap.StepCounter(tmp_path, rank=0, script="train.py", warmup=1, steps=3, stall_s=60.0,
                                deadline=None, launched=None, parent_pid=None)
    handle = register_optimizer_step_post_hook(state.post_hook)
    yield state
    handle.remove()


def _train(optimizer, model, iterations):
    for _ in range(iterations):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()


def test_one_optimizer_counts_one_step_per_call(counting):
    model = torch.nn.Linear(4, 2)
    _train(torch.optim.SGD(model.parameters(), lr=0.1), model, 3)
    assert counting.count == 3 and len(counting.starts) == 3
    assert counting.starts == sorted(counting.starts)
    assert counting.notes == []


def test_zero_style_calls_per_parameter_group_count_once_per_iteration(counting):
    # DeepSpeed ZeRO-1/2 (runtime/zero/stage_1_and_2.py, _optimizer_step) steps the inner optimizer
    # once per parameter group with param_groups narrowed to that group, then restores them.
    model = torch.nn.Linear(4, 2)
    inner = torch.optim.AdamW([{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.0}])
    for _ in range(3):
        inner.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        original = inner.param_groups
        for group in list(original):
            inner.param_groups = [group]
            inner.step()
        inner.param_groups = original
    assert counting.count == 3


def test_two_optimizers_on_disjoint_parameters_are_one_step(counting):
    generator, critic = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    opt_g, opt_c = torch.optim.SGD(generator.parameters(), lr=0.1), torch.optim.SGD(critic.parameters(), lr=0.1)
    for _ in range(3):
        opt_c.zero_grad()
        critic(generator(torch.ones(2, 4)).detach()).sum().backward()
        opt_c.step()
        opt_g.zero_grad()
        critic(generator(torch.ones(2, 4))).sum().backward()
        opt_g.step()
    assert counting.count == 3


def test_a_subclass_calling_super_step_counts_once(counting):
    class Clipped(torch.optim.SGD):
        def step(self, closure=None):  # type: ignore[override]
            torch.nn.utils.clip_grad_norm_([p for g in self.param_groups for p in g["params"]], 1.0)
            return super().step(closure)

    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # SGD.step itself is wrapped too now
    model = torch.nn.Linear(4, 2)
    _train(Clipped(model.parameters(), lr=0.1), model, 2)
    assert counting.count == 2


def test_parameters_are_counted_once_in_the_first_step(counting):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    _train(torch.optim.SGD(model.parameters(), lr=0.1), model, 2)
    record = counting.record()
    assert record["param_elements"] == 4 * 8 + 8 + 8 * 2 + 2
    assert record["param_bytes"] == record["param_elements"] * 4
    assert record["sharded_params"] is False


def test_every_rank_stops_at_the_step_after_the_last_measured(counting, tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(Left) as left:
        _train(optimizer, model, 10)
    assert left.value.code == 0
    record = json.loads((tmp_path / f"rank0{bootstrap.RECORD_SUFFIX}").read_text())
    assert record["ended"] == "steps_done"
    assert record["steps"] == 4  # 1 warm-up + 3 measured; the 5th step's hook is where it stopped
    assert record["window_steps"] == 3 and record["window_s"] > 0
    assert len(record["step_starts_s"]) == 4
    assert json.loads((tmp_path / "rank0.json").read_text())["result"]["rehearsal"] == "steps_done"
    progress = json.loads((tmp_path / "rank0.progress").read_text())
    assert progress["seq"] == 4 and progress["phase"] == "step 5"


def test_leaving_stops_every_process_the_rank_started(tmp_path):
    """A JIT build's ninja, DataLoader workers: os._exit alone would orphan them."""
    pids_file = tmp_path / "pids"
    code = (
        "import subprocess, sys, time\n"
        "from preflight.rehearse import bootstrap\n"
        "child = subprocess.Popen(['sleep', '120'])\n"
        "shell = subprocess.Popen(['sh', '-c', 'sleep 120 & echo $! > " + str(tmp_path / "grandchild") + "; wait'])\n"
        "time.sleep(0.5)\n"
        f"open({str(pids_file)!r}, 'w').write(f'{{child.pid}} {{shell.pid}}')\n"
        "bootstrap._leave(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert result.returncode == 3
    pids = [int(p) for p in pids_file.read_text().split()] + [int((tmp_path / "grandchild").read_text())]
    time.sleep(0.2)
    assert [pid for pid in pids if bootstrap._proc_start_time(pid) is not None] == []


def test_the_bootstrap_imports_only_torch_and_the_standard_library():
    """It runs with the job's interpreter, where preflight may not be installed."""
    source = (REPO_ROOT / "preflight" / "rehearse" / "bootstrap.py").read_text()
    imported = {line.split()[1].split(".")[0] for line in source.splitlines()
                if line.strip().startswith(("import ", "from ")) and not line.startswith("from __future__")}
    imported |= {line.strip().split()[1].split(".")[0] for line in source.splitlines()
                 if line.strip().startswith(("import ", "from ")) and line.startswith(" ")}
    assert "preflight" not in imported
    assert imported <= set(sys.stdlib_module_names) | {"torch"}


def test_the_bootstrap_writes_the_files_the_launcher_reads():
    from preflight.workers.common import RUN_DIR_ENV

    assert bootstrap.RUN_DIR_ENV == RUN_DIR_ENV
