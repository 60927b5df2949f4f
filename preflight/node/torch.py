"""What the job's torch is and sees, asked once in the job's interpreter.

preflight never imports torch to answer this: the job may run another interpreter (``--python``),
and a child keeps CUDA out of the pytest process (torch initialises it for ``MIG-`` device lists).
The question is :func:`preflight.probe.torch_child.facts`, asked by one of two processes
(:class:`JobTorchAnswer`):

- rank 0 of the rehearsal launch, when one starts: its ranks import the job's torch in the job's
  interpreter anyway, so rank 0 answers before it joins the process group
  (:data:`preflight.workers.rehearsal.TORCH_ANSWER`); a probe of our own would be one more
  ``import torch`` (3 CPU-s) on the cores the launch is starting on;
- otherwise the probe child, run as a script through the command transport, under a deadline (also
  when the launch ends or stalls without an answer, and whenever the command transport is not the
  real one: a test that answers the probe at the command layer gets its answer).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from preflight.node.transports import Transports
from preflight.probe.job_torch import JobTorch
from preflight.probe.command import run_command
from preflight.probe.job_python import script_argv
from preflight.waits import waiting

CHILD = Path(__file__).resolve().parent.parent / "probe" / "torch_child.py"
TIMEOUT_S = 90.0  # a cold import of a CUDA torch from a network filesystem takes tens of seconds
PROBE_RESERVE_S = 15.0  # of TIMEOUT_S, kept for the probe child when the launch's rank 0 has not answered


def torch_probe_argv(python: str) -> list[str]:
    """The child with the job's ``sys.path`` (``PYTHONPATH`` and the user site kept, the working directory
    and preflight's own folders off it: :mod:`preflight.probe.job_python`)."""
    return script_argv(python, CHILD)


DEEPSPEED_TIMEOUT_S = 15.0  # package metadata only: no torch import


def read_job_deepspeed(transports: Transports, timeout_s: float = DEEPSPEED_TIMEOUT_S) -> str | None:
    """The job's DeepSpeed version from its interpreter's package metadata (nothing imported), None when it
    has none or does not answer; for plans made before the job's torch answers."""
    result = transports.run([*torch_probe_argv(transports.python), "deepspeed"], timeout_s=timeout_s,
                            env=dict(transports.environ))
    try:
        found = json.loads(result.stdout.strip().splitlines()[-1]) if result.ok else None
    except (ValueError, IndexError):
        return None
    return str(found["version"]) if isinstance(found, dict) and found.get("version") else None


def from_child_output(python: str, data: Mapping[str, Any]) -> JobTorch:
    """The facts from the child's JSON."""
    deepspeed_version, deepspeed_roots = _deepspeed(data.get("deepspeed"))
    base = JobTorch(python=str(data.get("python") or python), python_version=data.get("python_version"),
                    wheels={str(k): str(v) for k, v in dict(data.get("wheels") or {}).items()},
                    deepspeed_version=deepspeed_version, deepspeed_roots=deepspeed_roots)
    if data.get("import_error") or not data.get("version"):
        return replace(base, problem=f"import torch failed: {data.get('import_error') or 'no version'}")
    nccl = data.get("nccl")
    return replace(
        base, version=str(data["version"]), cuda=data.get("cuda"), hip=data.get("hip"),
        arch_list=tuple(str(a) for a in data.get("arch_list") or ()),
        nccl=tuple(int(n) for n in nccl) if nccl else None, nccl_suffix=str(data.get("nccl_suffix") or ""),
        device_count=data.get("device_count"), device_count_error=data.get("device_count_error"),
        distributed=bool(data.get("distributed")), fsdp2_api=data.get("fsdp2_api"),
        bf16_excludes_emulation=bool(data.get("bf16_arg_including_emulation")),
        numpy_problem=data.get("numpy"))


def _deepspeed(found: object) -> tuple[str | None, tuple[str, ...]]:
    """The job's DeepSpeed version and the folders of its files from the child's answer; (None, ()) without one."""
    if not isinstance(found, Mapping) or not found.get("version"):
        return None, ()
    return str(found["version"]), tuple(str(r) for r in found.get("roots") or ())


def read_job_torch(transports: Transports, timeout_s: float = TIMEOUT_S) -> JobTorch:
    """Ask the job's interpreter; a failure to answer is a fact (``problem``), never an exception."""
    python = transports.python
    result = transports.run(torch_probe_argv(python), timeout_s=timeout_s, env=dict(transports.environ))
    if not result.ok:
        detail = result.describe_failure()
        tail = result.stderr.strip().splitlines()[-1:]
        if tail and tail[0] not in detail:
            detail = f"{detail}: {tail[0]}"
        return JobTorch(python=python, problem=f"the job's interpreter {python} did not answer: {detail}",
                        answered=False)
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = None
    if not isinstance(data, dict):
        return JobTorch(python=python, answered=False,
                        problem=f"the job's interpreter {python} gave no answer a Python interpreter gives: "
                                f"{result.stdout.strip()[:200]!r}")
    return from_child_output(python, data)


ANSWER_POLL_S = 0.05


class JobTorchAnswer:
    """The job's torch, asked once, by the launch's rank 0 or by the probe child (see the module's
    docstring). Nothing runs until :meth:`from_launch`, :meth:`probe` or :meth:`get` decides; a fake
    command transport decides at once (the probe, through it)."""

    def __init__(self, transports: Transports, timeout_s: float = TIMEOUT_S) -> None:
        self._transports = transports
        self._timeout_s = timeout_s
        self._created = time.monotonic()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._found: list[JobTorch] = []
        self.source = ""
        if transports.run is not run_command:
            self.probe()

    @property
    def until(self) -> float:
        """When the answer comes at the latest (``time.monotonic()``)."""
        return self._created + self._timeout_s

    def _start(self, source: str, gather: Callable[[], JobTorch]) -> bool:
        with self._lock:
            if self._thread is not None:
                return False
            self.source = source
            self._thread = threading.Thread(target=self._gather, args=(gather,), name="preflight-torch-answer",
                                            daemon=True)
            self._thread.start()
            return True

    def _gather(self, gather: Callable[[], JobTorch]) -> None:
        try:
            self._found.append(gather())
        except Exception as exc:  # noqa: BLE001 - a probe that failed is a fact about the node, never a crash
            self._found.append(JobTorch(python=self._transports.python, problem=f"the torch probe failed: {exc}",
                                        answered=False))

    def probe(self) -> bool:
        """Ask the probe child now (unless an answer is already on its way)."""
        return self._start("probe", lambda: read_job_torch(self._transports, self._left()))

    def known(self, answer: JobTorch, source: str) -> bool:
        """The caller already asked this interpreter in this process (``preflight rehearse`` counts the job's
        GPUs before the run starts): that answer is the run's; False when one was already on its way."""
        return self._start(source, lambda: answer)

    def from_launch(self, answer: Path, running: Callable[[], bool]) -> bool:
        """Let the launch's rank 0 answer in ``answer``; the probe child is asked after all when the
        launch ends without it or the deadline nears. False when the probe was already asked."""
        return self._start("rank 0 of the rehearsal launch", lambda: self._from_rank(answer, running))

    def _left(self) -> float:
        return max(5.0, self.until - time.monotonic())

    def _from_rank(self, answer: Path, running: Callable[[], bool]) -> JobTorch:
        while time.monotonic() < self.until - PROBE_RESERVE_S:
            try:
                data = json.loads(answer.read_text())
            except (OSError, ValueError):
                data = None
            if isinstance(data, dict) and "unanswered" not in data:
                return from_child_output(self._transports.python, data)
            if isinstance(data, dict):
                break  # the rank could not ask: the probe child asks instead
            if not running():
                break
            time.sleep(ANSWER_POLL_S)
        self.source = "probe"
        return read_job_torch(self._transports, self._left())

    def ready(self) -> bool:
        """Whether :meth:`get` would answer at once."""
        return bool(self._found)

    def get(self) -> JobTorch:
        """The answer (asking the probe child now when nothing was decided yet), waited for."""
        self.probe()
        thread = self._thread
        assert thread is not None
        if thread.is_alive():
            with waiting(f"the job's torch (import torch in {self._transports.python}, asked by {self.source})",
                         self.until):
                thread.join()
        thread.join()
        return self._found[0] if self._found else JobTorch(python=self._transports.python, answered=False,
                                                           problem="the torch probe ended without an answer")
