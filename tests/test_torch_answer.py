"""Who answers "what is the job's torch": the rehearsal launch's rank 0 when a launch starts (its ranks import
torch anyway: issue 27 counted the probe as a fourth ``import torch``, 3.3 CPU-s on the launch's cores),
else the probe child, run with the job's ``sys.path`` (issue 24: ``python -I`` dropped PYTHONPATH and the
user site). A broken interpreter is a finding that names it (issue 25)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from preflight.judge.cuda_runtime import judge_torch_build
from preflight.node.torch import JobTorchAnswer, from_child_output, read_job_torch, torch_probe_argv
from preflight.node.transports import Transports
from preflight.outcome import Status
from preflight.workers.rehearsal import answer_torch
from tests.fakes.fake_torch import cuda_answer


def _later(path: Path, data: dict[str, object], after_s: float) -> threading.Thread:
    def write() -> None:
        time.sleep(after_s)
        path.write_text(json.dumps(data))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_rank_0_answers_and_no_probe_runs(tmp_path: Path) -> None:
    answer = JobTorchAnswer(Transports())  # the real command transport: a launch may answer
    assert not answer.ready()  # nothing asked until someone decides
    _later(tmp_path / "torch.json", cuda_answer(3), 0.2)  # what rank 0 writes (a CUDA torch, unlike this one)
    assert answer.from_launch(tmp_path / "torch.json", running=lambda: True)
    found = answer.get()
    assert (found.version, found.device_count, found.gpus) == ("2.4.1+cu124", 3, 3)
    assert answer.source == "rank 0 of the rehearsal launch"
    assert not answer.probe()  # already answered: asking again starts nothing


def test_a_launch_that_ends_without_answering_leaves_it_to_the_probe(tmp_path: Path) -> None:
    answer = JobTorchAnswer(Transports())
    assert answer.from_launch(tmp_path / "torch.json", running=lambda: False)
    found = answer.get()
    assert found.installed and found.python == sys.executable and answer.source == "probe"


def test_a_rank_that_could_not_ask_leaves_it_to_the_probe(tmp_path: Path) -> None:
    (tmp_path / "torch.json").write_text(json.dumps({"unanswered": "OSError: no space left on device"}))
    answer = JobTorchAnswer(Transports())
    answer.from_launch(tmp_path / "torch.json", running=lambda: True)
    assert answer.get().installed and answer.source == "probe"


def test_rank_0_writes_what_the_probe_would_answer(tmp_path: Path) -> None:
    answer_torch(tmp_path)  # in this process: torch is importable here, as in a rank
    written = json.loads((tmp_path / "torch.json").read_text())
    import torch

    assert written["version"] == str(torch.__version__) and written["python"] == sys.executable
    assert set(written) >= {"cuda", "device_count", "distributed", "fsdp2_api", "numpy", "wheels", "deepspeed"}


def _interpreter(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_an_interpreter_that_prints_junk_is_named_not_told_to_install_torch(tmp_path: Path) -> None:
    python = _interpreter(tmp_path, 'echo "{not json"')
    found = read_job_torch(Transports(python=python), timeout_s=30)
    assert not found.installed and not found.answered
    assert found.problem is not None and python in found.problem and "{not json" in found.problem
    verdict = judge_torch_build(found, 0)
    assert (verdict.status, verdict.code) == (Status.FAIL, "JOB_PYTHON_UNUSABLE")
    assert "pip install" not in (verdict.remediation or "") and python in (verdict.remediation or "")


def test_an_interpreter_that_hangs_is_named_at_its_deadline(tmp_path: Path) -> None:
    python = _interpreter(tmp_path, "exec sleep 60")
    started = time.monotonic()
    found = read_job_torch(Transports(python=python), timeout_s=1.5)
    assert time.monotonic() - started < 10
    assert not found.answered and found.problem is not None and python in found.problem


def test_the_probe_keeps_the_jobs_sys_path_and_drops_the_working_directory(tmp_path: Path) -> None:
    argv = torch_probe_argv(sys.executable)
    assert "-I" not in argv and "-E" not in argv and "-s" not in argv  # PYTHONPATH and the user site stay
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('the stray ./torch was imported')\n")
    import subprocess

    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert "import_error" not in answer and answer["version"], answer


def test_the_jobs_deepspeed_is_read_from_the_answer_and_absent_without_one() -> None:
    found = from_child_output("/venv/bin/python", {"version": "2.13.0", "deepspeed": {"version": "0.19.8",
                                                                                      "roots": ["/venv/ds"]}})
    assert (found.deepspeed_version, found.deepspeed_roots) == ("0.19.8", ("/venv/ds",))
    for answer in ({"version": "2.13.0"}, {"version": "2.13.0", "deepspeed": {"version": None}}, {"deepspeed": 3}):
        without = from_child_output("py", answer)
        assert (without.deepspeed_version, without.deepspeed_roots) == (None, ())


def test_an_answer_the_command_already_has_is_the_runs_and_no_child_asks_again() -> None:
    """``preflight rehearse`` asks the job's interpreter to count its GPUs before the run; the run takes that
    answer (issue 27: the probe child ran twice, 2.3 CPU-s each). Once an answer is on its way, none replaces it."""
    from preflight.node import Node
    from preflight.probe.job_torch import JobTorch

    node = Node(Transports(python=sys.executable), nproc=None)  # the real command transport: nothing asked until decided
    answer = JobTorch(python=sys.executable, version="2.13.0+cpu", device_count=0)
    assert node.torch_known(answer, "the command, before the run")
    assert node.torch is answer and node.torch_ready
    assert not node.torch_known(JobTorch(python=sys.executable, version="other"), "later")
    assert not node.torch_answered_by(Path("/nonexistent/torch.json"), lambda: True)  # no launch asks either
    assert node.torch is answer
