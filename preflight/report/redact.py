"""Keep secrets out of everything preflight writes: reports, logs and the terminal summary.

Three layers, applied by the report writers:

* :func:`report_environment` keeps only environment variables that matter to a GPU job (allow-list
  by prefix and name) and blanks the value of any whose *name* looks secret, even inside the list.
* :func:`redact_text` scrubs free text (command lines, logs, error messages) for secrets found by
  their *shape*: URL passwords, ``Authorization`` headers, JWTs, cloud keys, private key blocks,
  well-known token prefixes and ``NAME=value`` style assignments whose name looks secret.
* :func:`redact_obj` walks a JSON-able structure, blanking values under secret-looking keys and
  scrubbing every string.
* :func:`redact_files` scrubs, in place, the files a launch's ranks wrote raw (their logs, error
  files, torchrun's log) and makes them private like the reports.

Patterns are chosen so ordinary diagnostics (GPU UUIDs, PCI bus ids, hex addresses, NCCL lines,
versions, paths) come through untouched; the tests hold every shared capture to that.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from preflight.report.secret_names import REDACTED, is_secret_name, redact_assignments
from preflight.report.secret_shapes import redact_shapes
from preflight.report.writer import PRIVATE_DIR_MODE, private_tree, write_bytes_atomic

__all__ = [
    "ALLOWED_NAMES",
    "ALLOWED_PREFIXES",
    "REDACTED",
    "is_reported_variable",
    "is_secret_name",
    "omitted_variable_count",
    "redact_files",
    "redact_obj",
    "redact_text",
    "report_environment",
]


# ---------------------------------------------------------------------------------------------
# Environment allow-list
# ---------------------------------------------------------------------------------------------

ALLOWED_PREFIXES: tuple[str, ...] = (
    "CUDA_",  # CUDA_VISIBLE_DEVICES, CUDA_HOME, CUDA_PATH, CUDA_LAUNCH_BLOCKING, CUDA_MODULE_LOADING
    "CUBLAS_",
    "CUBLASLT_",
    "CUDNN_",
    "NCCL_",  # every NCCL tunable; the main cause of "works elsewhere, hangs here"
    "NVIDIA_",  # container toolkit: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES
    "TORCH_",  # TORCH_NCCL_*, TORCH_DISTRIBUTED_DEBUG, TORCH_CUDA_ARCH_LIST
    "TORCHELASTIC_",  # set by torchrun inside workers
    "TORCHINDUCTOR_",
    "PYTORCH_",  # PYTORCH_CUDA_ALLOC_CONF
    "OMP_",  # OMP_NUM_THREADS (torchrun warns about it)
    "DS_",  # DeepSpeed: DS_SKIP_CUDA_CHECK, DS_BUILD_*
    "GLOO_",  # GLOO_SOCKET_IFNAME decides the rendezvous interface
    "FI_",  # libfabric (AWS EFA): FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA
)
"""Prefixes of variables that change how CUDA, NCCL, torch or a launcher behave."""

ALLOWED_NAMES: frozenset[str] = frozenset(
    {
        "PATH",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",  # a preloaded library can shadow libcuda / libnccl
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        # torchrun / torch.distributed rendezvous
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        # Slurm: job identity and the GPU/CPU shape only (not account, user or partition)
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SLURM_STEP_ID",
        "SLURM_JOB_NUM_NODES",
        "SLURM_NNODES",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_JOB_GPUS",
        "SLURM_STEP_GPUS",
        "SLURM_GPUS_ON_NODE",
        "SLURM_GPUS_PER_NODE",
        "SLURM_CPUS_ON_NODE",
        "SLURM_CPUS_PER_TASK",
        # Kubernetes: only the marker that we run inside a pod (explains PID-namespace effects
        # such as memory in use with "No running processes found"); pod names are the hostname.
        "KUBERNETES_SERVICE_HOST",
    }
)
"""Exact names kept besides the prefixes. Everything else is left out of reports entirely."""


def is_reported_variable(name: str) -> bool:
    """Whether the variable ``name`` belongs in a report at all (case-sensitive, as on Linux)."""
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def report_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``env``, sorted by name, with secret-named values blanked.

    Values of kept variables are also scrubbed by :func:`redact_text`, so a password inside a
    URL in, say, ``NCCL_NET_PLUGIN_URL`` never survives.
    """
    kept: dict[str, str] = {}
    for name in sorted(env):
        if not is_reported_variable(name):
            continue
        value = env[name]
        kept[name] = REDACTED if (value and is_secret_name(name)) else redact_text(value)
    return kept


def omitted_variable_count(env: Mapping[str, str]) -> int:
    """How many variables :func:`report_environment` leaves out (reported as a number only)."""
    return sum(1 for name in env if not is_reported_variable(name))


# ---------------------------------------------------------------------------------------------
# Text and structures
# ---------------------------------------------------------------------------------------------


def redact_text(text: str) -> str:
    """``text`` with every recognised secret replaced by :data:`REDACTED`.

    Shapes first (so ``HF_TOKEN=hf_...`` keeps its ``hf_`` hint), then assignments to
    secret-looking names. Idempotent: redacting twice gives the same text as redacting once.
    """
    return redact_assignments(redact_shapes(text))


def redact_obj(obj: Any) -> Any:
    """A copy of a JSON-able structure with secrets removed.

    Values under a secret-looking key have every string replaced (numbers, booleans and nulls
    carry no secret text and are kept, so a metric named ``..._token_...`` keeps its figure);
    every other string, dict keys included, goes through :func:`redact_text`. An object of any
    other type is turned into its scrubbed ``str`` so nothing unscrubbed reaches a writer.
    """
    return _walk(obj, under_secret=False)


def _walk(obj: Any, *, under_secret: bool) -> Any:
    if isinstance(obj, str):
        if under_secret:
            return obj if (not obj or obj == REDACTED) else REDACTED
        return redact_text(obj)
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, Mapping):
        return {
            _walk(key, under_secret=False): _walk(
                value, under_secret=under_secret or (isinstance(key, str) and is_secret_name(key))
            )
            for key, value in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        walked = [_walk(item, under_secret=under_secret) for item in obj]
        return tuple(walked) if isinstance(obj, tuple) else walked
    return _walk(str(obj), under_secret=under_secret)


# ---------------------------------------------------------------------------------------------
# Files written raw by a launch
# ---------------------------------------------------------------------------------------------


def redact_files(directory: Path) -> list[Path]:
    """Scrub every text file under ``directory`` in place and make the tree private (files 0600,
    directories 0700); returns the files that changed.

    The ranks run in the job's interpreter and write their logs and error files raw (they may import
    only the standard library), so the parent calls this once a launch has ended, before any check
    reads the files. A file whose scrubbed copy cannot be written (a full disk) is removed rather than
    left with its secrets; a file holding NUL bytes (a checkpoint shard) is binary and left as it is.
    """
    changed: list[Path] = []
    for top, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(top) / name
            if not path.is_symlink() and path.is_file() and _redact_file(path):
                changed.append(path)
    private_tree(directory)
    with contextlib.suppress(OSError):
        directory.chmod(PRIVATE_DIR_MODE)  # a launch's own directory, below the report directory
    return changed


def _redact_file(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if b"\0" in data:
        return False
    text = data.decode("utf-8", errors="surrogateescape")  # undecodable bytes come back unchanged
    redacted = redact_text(text)
    if redacted == text:
        return False
    try:
        write_bytes_atomic(path, redacted.encode("utf-8", errors="surrogateescape"))
    except OSError:
        path.unlink(missing_ok=True)
    return True
