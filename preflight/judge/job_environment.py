"""Variables inherited from the shell that break or trap a ``torchrun --standalone`` job, and what each does.

What torch does with each was read in torch 2.13's own source (``torch/distributed/run.py``, the elastic
agent, ``torch/distributed/rendezvous.py``) and tried on this project's machine:

- ``PYTHONWARNINGS`` with an ``error`` action: every matching warning raises, in every rank.
- ``OMP_NUM_THREADS`` that libgomp rejects (``0``, ``abc``, empty): libgomp prints "Invalid value for
  environment variable OMP_NUM_THREADS" in every rank and uses one thread per CPU; torchrun sets 1 only
  when the variable is absent (``run.py``: ``if "OMP_NUM_THREADS" not in os.environ and nproc_per_node > 1``)
  and passes a present value on (``local_elastic_agent.py``), so every rank oversubscribes the cores.
- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``: the elastic agent writes fresh values into every rank's
  environment (``local_elastic_agent.py`` ``worker_env``, over the inherited copy in
  ``subprocess_handler.py``), so the torchrun job ignores them; a script started without torchrun reads
  them (``rendezvous.py`` ``_env_rendezvous_handler``) and waits ``default_pg_timeout`` (30 min) for peers.
- ``MASTER_ADDR``, ``MASTER_PORT``: ``--standalone`` rendezvouses on ``localhost:0`` (``run.py``) and the
  agent gives the ranks the rendezvous store's address and port, so the job ignores them: a note, no WARN.
- more than one Slurm task per node: torch reads no ``SLURM_`` variable, so each task's ``torchrun
  --standalone`` is a job of its own on every GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

WARNING_ACTIONS = ("default", "always", "all", "ignore", "module", "once", "error")
"""Python's warning actions; an entry names one by any prefix (``warnings._getaction``)."""

LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")
SLURM_VARIABLES = ("SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_NNODES",
                   "SLURM_JOB_NUM_NODES")
EVIDENCE_NAMES = ("PYTHONWARNINGS", *LAUNCH_VARIABLES, *RENDEZVOUS_VARIABLES, *SLURM_VARIABLES)
"""Shown in the environment check's evidence besides the NCCL_/OMP_ variables."""

PG_TIMEOUT_NOTE = "default_pg_timeout, 30 min"
_TASKS_ENTRY = re.compile(r"^\s*(\d+)(?:\(x(\d+)\))?\s*$")


@dataclass(frozen=True, slots=True)
class JobEnvFinding:
    """One inherited variable, what it does to the job, and the fix; ``warns`` False for a note."""

    variable: str
    value: str | None
    why: str
    fix: str
    warns: bool = True


def warning_error_entries(value: str) -> list[str]:
    """The entries of a ``PYTHONWARNINGS`` value (``-W`` syntax, comma-separated) whose action is ``error``."""
    found = []
    for entry in value.split(","):
        action = entry.split(":", 1)[0].strip().lower()
        if action and next((a for a in WARNING_ACTIONS if a.startswith(action)), None) == "error":
            found.append(entry.strip())
    return found


def _warning_scope(entry: str) -> str:
    """What an ``error`` entry turns into an exception, in words."""
    fields = [f.strip() for f in entry.split(":")] + [""] * 4
    message, category, module = fields[1], fields[2], fields[3]
    words = [f"every {category} (and its subclasses)" if category and category != "Warning" else "every warning"]
    if message:
        words.append(f"whose message starts with {message!r}")
    if module:
        words.append(f"raised from module {module!r}")
    return " ".join(words)


def python_warnings_finding(env: Mapping[str, str]) -> JobEnvFinding | None:
    """``PYTHONWARNINGS=error`` (or ``error::UserWarning``, ``e``, ...): the first matching warning crashes a rank."""
    value = env.get("PYTHONWARNINGS")
    errors = warning_error_entries(value) if value else []
    if not errors or value is None:
        return None
    scope = "; ".join(_warning_scope(e) for e in errors)
    return JobEnvFinding(
        "PYTHONWARNINGS", value,
        f"Python raises {scope} as an exception in every rank: the first such warning that torch or any library "
        "emits (deprecations, a DataLoader or checkpoint notice) crashes that rank, and torchrun stops the others",
        "unset PYTHONWARNINGS (turn warnings into errors in a test run of your own code, not in the job)")


def omp_threads_valid(value: str) -> bool:
    """What libgomp accepts: a positive whole number, or a comma-separated list of them (one per nesting level)."""
    pieces = [p.strip() for p in value.split(",")]
    return all(p.isascii() and p.isdigit() and int(p) > 0 for p in pieces)


def omp_threads_finding(env: Mapping[str, str], *, ranks: int, cores_per_rank: float | None) -> JobEnvFinding | None:
    """An ``OMP_NUM_THREADS`` libgomp rejects: one thread per CPU in every rank, and a complaint in every log."""
    value = env.get("OMP_NUM_THREADS")
    if value is None or omp_threads_valid(value):
        return None
    effect = ("libgomp prints 'Invalid value for environment variable OMP_NUM_THREADS' in every rank and falls back "
              "to one thread per CPU")
    if ranks > 1:
        effect += (f"; torchrun sets OMP_NUM_THREADS=1 only when the variable is absent, so each of the {ranks} ranks "
                   f"runs a thread per core: CPU-side work is oversubscribed {ranks}-fold (a DDP step 6x slower "
                   "was measured)")
    threads = max(1, int(cores_per_rank)) if cores_per_rank else None
    fix = f"export OMP_NUM_THREADS={threads}" if threads else "unset OMP_NUM_THREADS (torchrun then uses 1 per rank)"
    return JobEnvFinding("OMP_NUM_THREADS", value, f"not a positive whole number: {effect}", fix)


def launch_variable_findings(env: Mapping[str, str]) -> list[JobEnvFinding]:
    """Launch variables left from another launch (WARN); ``MASTER_ADDR``/``MASTER_PORT`` alone are a note."""
    present = [name for name in (*LAUNCH_VARIABLES, *RENDEZVOUS_VARIABLES) if env.get(name, "").strip()]
    fix = "unset " + " ".join(present) + " (left from another launch; torchrun sets them for each rank)"
    found: list[JobEnvFinding] = []
    if env.get("RANK", "").strip():
        found.append(JobEnvFinding(
            "RANK", env["RANK"],
            "torchrun --standalone gives each rank its own RANK, so the job ignores it; a script started without "
            f"torchrun (python train.py) reads it, and init_process_group('env://') joins as rank {env['RANK']} "
            f"and waits for peers that never come ({PG_TIMEOUT_NOTE})", fix))
    if env.get("WORLD_SIZE", "").strip():
        found.append(JobEnvFinding(
            "WORLD_SIZE", env["WORLD_SIZE"],
            "torchrun --standalone sets WORLD_SIZE to its own rank count, so the job ignores it; a script started "
            f"without torchrun sees a world of {env['WORLD_SIZE']} (scripts that test WORLD_SIZE > 1 turn "
            f"distributed on) and init_process_group waits for ranks that never start ({PG_TIMEOUT_NOTE})", fix))
    if env.get("LOCAL_RANK", "").strip():
        found.append(JobEnvFinding(
            "LOCAL_RANK", env["LOCAL_RANK"],
            "torchrun --standalone sets LOCAL_RANK for each rank, so the job ignores it; a script started without "
            f"torchrun that calls torch.cuda.set_device(LOCAL_RANK) runs on GPU {env['LOCAL_RANK']} (or fails "
            "with 'invalid device ordinal')", fix))
    for name in RENDEZVOUS_VARIABLES:
        if env.get(name, "").strip():
            found.append(JobEnvFinding(
                name, env[name],
                "ignored by torchrun --standalone: it rendezvouses on localhost and a free port and gives each rank "
                "that address and port; only a script started without torchrun (init_process_group('env://')) "
                "or torchrun without --standalone uses it", fix, warns=False))
    return found


def tasks_per_node(env: Mapping[str, str]) -> int | None:
    """The most Slurm tasks any node of the allocation runs (``SLURM_TASKS_PER_NODE`` is ``2(x3),1`` style)."""
    listed = env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE")
    if listed:
        counts = [_TASKS_ENTRY.match(part) for part in listed.split(",")]
        if all(counts):
            return max(int(m.group(1)) for m in counts if m)
        return None
    try:
        tasks = int(env.get("SLURM_NTASKS", ""))
        nodes = int(env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or "1")
    except ValueError:
        return None
    return -(-tasks // max(1, nodes))


def slurm_tasks_finding(env: Mapping[str, str]) -> JobEnvFinding | None:
    """More than one Slurm task per node: ``srun torchrun --standalone`` starts that many separate jobs."""
    per_node = tasks_per_node(env)
    if per_node is None or per_node <= 1:
        return None
    name = next(n for n in ("SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS") if env.get(n))
    return JobEnvFinding(
        name, env[name],
        f"{per_node} Slurm tasks per node: srun in this allocation starts the job's command {per_node} times on the "
        "node, and torch reads no SLURM_ variable, so each torchrun --standalone is a job of its own (its own "
        f"rendezvous on a free port) with a rank on every GPU: {per_node} copies of the training share each GPU",
        "start it with `srun --ntasks-per-node=1 torchrun --standalone ...`, or run torchrun in the batch script "
        "without srun")


def job_environment_findings(env: Mapping[str, str], *, ranks: int,
                             cores_per_rank: float | None) -> list[JobEnvFinding]:
    """Every finding of this module, warnings before notes."""
    found = [f for f in (python_warnings_finding(env), omp_threads_finding(env, ranks=ranks,
                                                                            cores_per_rank=cores_per_rank),
                         slurm_tasks_finding(env)) if f is not None]
    found += launch_variable_findings(env)
    return sorted(found, key=lambda f: not f.warns)
