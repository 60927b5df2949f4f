"""The rehearsal bootstrap's step counting, in-process with real torch optimizers: one step per
training iteration whatever the optimizer calls look like, and the stop at the step after the
last measured one. Its exit (``os._exit``) is replaced by an exception here."""

from __future__ import annotations

import ast
import errno
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from preflight.rehearse import beat as beats
from preflight.rehearse import bootstrap
from tests.conftest import REPO_ROOT


class Left(BaseException):
    """Raised instead of os._exit (BaseException: the hook's own error guard must not swallow it)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _raise_left(code: int) -> None:
    raise Left(code)


def _raise_left_with(code: int, state: object = None) -> None:
    raise Left(code)


@pytest.fixture
def counting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[bootstrap.StepCounter]:
    """A StepCounter of 1 warm-up + 3 measured steps with its post hook registered globally."""
    monkeypatch.setattr(bootstrap, "_leave", _raise_left_with)
    state = bootstrap.StepCounter(tmp_path, rank=0, script="train.py", warmup=1, steps=3, stall_s=60.0,
                                deadline=None, launched=None, parent_pid=None)
    handle = register_optimizer_step_post_hook(state.post_hook)
    yield state
    handle.remove()


def _train(optimizer: torch.optim.Optimizer, model: torch.nn.Module, iterations: int) -> None:
    for _ in range(iterations):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()


def test_one_optimizer_counts_one_step_per_call(counting: bootstrap.StepCounter) -> None:
    model = torch.nn.Linear(4, 2)
    _train(torch.optim.SGD(model.parameters(), lr=0.1), model, 3)
    assert counting.count == 3 and len(counting.starts) == 3
    assert counting.starts == sorted(counting.starts)
    assert counting.notes == []


def test_zero_style_calls_per_parameter_group_count_once_per_iteration(counting: bootstrap.StepCounter) -> None:
    # DeepSpeed ZeRO-1/2 (runtime/zero/stage_1_and_2.py, _optimizer_step) steps the inner optimizer
    # once per parameter group with param_groups narrowed to that group, then restores them.
    model = torch.nn.Linear(4, 2)
    groups: list[dict[str, Any]] = [{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.0}]
    inner = torch.optim.AdamW(groups)
    for _ in range(3):
        inner.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        original = inner.param_groups
        for group in list(original):
            inner.param_groups = [group]
            inner.step()
        inner.param_groups = original
    assert counting.count == 3


def test_two_optimizers_on_disjoint_parameters_are_one_step(counting: bootstrap.StepCounter) -> None:
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


def test_a_subclass_calling_super_step_counts_once(counting: bootstrap.StepCounter) -> None:
    class Clipped(torch.optim.SGD):
        def step(self, closure: Callable[[], float] | None = None) -> Any:
            torch.nn.utils.clip_grad_norm_([p for g in self.param_groups for p in g["params"]], 1.0)
            return super().step(closure)

    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # SGD.step itself is wrapped too now
    model = torch.nn.Linear(4, 2)
    _train(Clipped(model.parameters(), lr=0.1), model, 2)
    assert counting.count == 2


def test_parameters_are_counted_once_in_the_first_step(counting: bootstrap.StepCounter) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    _train(torch.optim.SGD(model.parameters(), lr=0.1), model, 2)
    record = counting.record()
    assert record["param_elements"] == 4 * 8 + 8 + 8 * 2 + 2
    assert record["param_bytes"] == record["param_elements"] * 4
    assert record["sharded_params"] is False


def _beat(tmp_path: Path) -> beats.BeatView:
    view = beats.read_path(tmp_path / beats.beat_name(0))
    assert view is not None
    return view


def test_every_rank_stops_at_the_step_after_the_last_measured(counting: bootstrap.StepCounter, tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(Left) as left:
        _train(optimizer, model, 10)
    assert left.value.code == 0
    view = _beat(tmp_path)
    assert view.ended == "steps_done" and view.exit_code == 0
    assert view.count == 4  # 1 warm-up + 3 measured; the 5th step's hook is where it stopped
    assert len(view.step_starts) == 4 and view.window_end > view.window_start > 0
    assert view.record is not None and view.record["window_steps"] == 3 and view.record["window_s"] > 0
    assert view.record["optimizers"] == [] and view.record["step_starts_s"] == []  # the header holds the times


def test_the_stop_preflight_writes_into_the_beat_file_is_where_every_rank_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "_leave", _raise_left_with)
    fd = beats.create(tmp_path / beats.beat_name(0), capacity=30, target=4, launched=time.monotonic(), stop_at=28)
    state = bootstrap.StepCounter(tmp_path, rank=0, script="train.py", warmup=1, steps=3, stall_s=60.0,
                                  deadline=None, launched=None, parent_pid=None, capacity=30)
    handle = register_optimizer_step_post_hook(state.post_hook)
    try:
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _train(optimizer, model, 6)  # past the plan's 4: preflight has not decided yet
        beats.set_stop_at(fd, 7)
        with pytest.raises(Left):
            _train(optimizer, model, 20)
    finally:
        handle.remove()
        os.close(fd)
    assert _beat(tmp_path).count == 7


def test_a_full_disk_never_keeps_the_rank_from_stopping_at_its_step(counting: bootstrap.StepCounter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's copy in the beat file fails (as a write on a full disk would): a note, and the rank
    still stops at its step with its count in the beat file's header."""
    def full(record: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(counting.beat, "write_record", full)
    counting._tick(0.0)  # a watchdog tick that meets the full disk survives it
    model = torch.nn.Linear(4, 2)
    with pytest.raises(Left) as left:
        _train(torch.optim.SGD(model.parameters(), lr=0.1), model, 10)
    assert left.value.code == 0 and counting.count == 4 and _beat(tmp_path).count == 4
    assert any("No space left on device" in note for note in counting.notes)


def test_marks_count_the_steps_of_a_script_without_an_optimizer(counting: bootstrap.StepCounter, tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(optimizer, model, 2)  # two optimizer steps first: the marks count from the first mark on
    with pytest.raises(Left):
        for _ in range(10):
            counting.mark()
            optimizer.step()  # ignored once the script marks its steps
    assert _beat(tmp_path).count == 4 and counting.marking
    assert any("marks its steps" in note for note in counting.notes)


def test_backward_passes_without_an_optimizer_end_the_rank_as_uncountable(counting: bootstrap.StepCounter, tmp_path: Path) -> None:
    with pytest.raises(Left) as left:
        for _ in range(20):
            counting.on_backward()
    assert left.value.code == 0
    view = _beat(tmp_path)
    assert view.ended == "uncountable" and view.backward == 5 and view.count == 0


def test_the_scripts_os_exit_is_recorded_with_where_it_was_called(counting: bootstrap.StepCounter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "_REAL_EXIT", _raise_left)
    exit_now = bootstrap._record_os_exit(counting)
    with pytest.raises(Left) as left:
        exit_now(3)
    assert left.value.code == 3
    view = _beat(tmp_path)
    assert view.ended == "os_exit" and view.exit_code == 3
    assert view.record is not None
    frames = view.record["error"]["frames"]
    assert any(f["file"] == __file__ and "exit_now(3)" in f["code"] for f in frames)


def test_a_step_function_is_marked_wherever_it_is_defined() -> None:
    source = (b"class Trainer:\n    def train_step(self):\n        pass\n"
              b"def main():\n    def train_step():\n        pass\n")
    tree, found = bootstrap.decorate_step_function(source, "train.py", "train_step")
    assert found == 2
    marked = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "train_step"]
    assert all(isinstance(n.decorator_list[0], ast.Name) and n.decorator_list[0].id == bootstrap.STEP_DECORATOR
               for n in marked)
    assert bootstrap.decorate_step_function(source, "train.py", "Trainer.train_step")[1] == 1
    assert bootstrap.decorate_step_function(source, "train.py", "missing")[1] == 0


def test_leaving_stops_every_process_the_rank_started(tmp_path: Path) -> None:
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


def _imports(path: Path) -> set[str]:
    """Top-level names a module imports, leaving out what only the type checker reads."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for child in node.body for n in ast.walk(child)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module != "__future__":
            names.add(node.module.split(".")[0])
    return names


def test_the_bootstrap_and_its_siblings_import_only_torch_and_the_standard_library() -> None:
    """They run with the job's interpreter, where preflight may not be installed: the bootstrap loads
    beat.py and rank_log.py by their paths."""
    allowed = set(sys.stdlib_module_names) | {"torch"}
    for relative in ("rehearse/bootstrap.py", "rehearse/beat.py", "workers/rank_log.py"):
        imported = _imports(REPO_ROOT / "preflight" / relative)
        assert "preflight" not in imported and imported <= allowed, (relative, imported - allowed)


def test_the_bootstrap_runs_where_preflight_cannot_be_imported(tmp_path: Path) -> None:
    """A copy of the three files outside any package, run as a plain script: it loads its siblings."""
    for relative in ("rehearse/bootstrap.py", "rehearse/beat.py", "workers/rank_log.py"):
        target = tmp_path / "pkg" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((REPO_ROOT / "preflight" / relative).read_text())
    script = tmp_path / "script.py"
    script.write_text("import os\nprint('ran', os.environ['PREFLIGHT_REHEARSAL'])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PREFLIGHT_RUN_DIR": str(tmp_path)})
    result = subprocess.run([sys.executable, "-I", str(tmp_path / "pkg" / "rehearse" / "bootstrap.py"), str(script)],
                            env=env, cwd=tmp_path, timeout=120, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    log = tmp_path / "rank0.log"
    assert "ran 1" in log.read_text() and log.stat().st_mode & 0o777 == 0o600
    view = beats.read_path(tmp_path / beats.beat_name(0))
    assert view is not None and view.ended == "returned"


def test_the_bootstrap_writes_the_files_the_launcher_reads() -> None:
    from preflight.workers.common import RUN_DIR_ENV

    assert bootstrap.RUN_DIR_ENV == RUN_DIR_ENV


def test_a_child_the_script_forks_counts_nothing_into_its_ranks_beat_file(counting: bootstrap.StepCounter, tmp_path: Path) -> None:
    """A DataLoader worker or Pool worker inherits the hooks and the shared mapping (os.register_at_fork)."""
    pid = os.fork()
    if pid == 0:  # the child: steps here must not touch the rank's count
        model = torch.nn.Linear(4, 2)
        _train(torch.optim.SGD(model.parameters(), lr=0.1), model, 3)
        counting.mark()
        counting.on_backward()
        os._exit(0 if counting.forked and counting.count == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _beat(tmp_path).count == 0 and not counting.forked
