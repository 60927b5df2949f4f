"""Keep secrets out of everything preflight writes: reports, logs and the terminal summary.

Three layers, applied by the report writers:

* :func:`report_environment` keeps only environment variables that matter to a GPU job (allow-list
  by prefix and name) and blanks the value of any whose *name* looks secret, even inside the list.
* :func:`redact_text` scrubs free text (command lines, logs, error messages) for secrets found by
  their *shape*: URL passwords, ``Authorization`` headers, JWTs, cloud keys, private key blocks,
  well-known token prefixes and ``NAME=value`` style assignments whose name looks secret.
* :func:`redact_obj` walks a JSON-able structure, blanking values under secret-looking keys and
  scrubbing every string; a list of strings is read as a command line (``--token VALUE``).
* :func:`redact_argv` / :func:`redact_command` scrub a command line (a list, or one string) for what
  preflight prints of it.
* :func:`redact_files` scrubs, in place, the files a launch's ranks wrote raw (their logs, error
  files, torchrun's log) and makes them private like the reports.

Patterns are chosen so ordinary diagnostics (GPU UUIDs, PCI bus ids, hex addresses, NCCL lines,
versions, paths) come through untouched; the tests hold every shared capture to that.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from preflight.report.secret_names import REDACTED, is_secret_name, redact_argv_values, redact_assignments
from preflight.report.secret_shapes import redact_shapes
from preflight.report.writer import PRIVATE_DIR_MODE, private_tree

__all__ = [
    "ALLOWED_NAMES",
    "ALLOWED_PREFIXES",
    "REDACTED",
    "is_reported_variable",
    "is_secret_name",
    "omitted_variable_count",
    "redact_argv",
    "redact_command",
    "redact_file",
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


def redact_argv(args: Sequence[str]) -> list[str]:
    """A command line with its secrets gone: the value after a secret-named option (``--hf_token hf_x``,
    ``--password hunter2``), ``--token=x``, and secrets by shape in any argument. For what preflight prints
    or stores of a command (the script's arguments of ``preflight rehearse``, ``--launch``)."""
    return [redact_text(arg) for arg in redact_argv_values(list(args))]


def redact_command(text: str) -> str:
    """A command line given as one string (``--launch "torchrun train.py --token x"``), scrubbed."""
    return redact_text(text)


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
        items = redact_argv_values(list(obj)) if all(isinstance(item, str) for item in obj) else obj
        walked = [_walk(item, under_secret=under_secret) for item in items]  # an argv: --token VALUE
        return tuple(walked) if isinstance(obj, tuple) else walked
    return _walk(str(obj), under_secret=under_secret)


# ---------------------------------------------------------------------------------------------
# Files written raw by a launch
# ---------------------------------------------------------------------------------------------


def redact_files(directory: Path) -> list[Path]:
    """Scrub every regular file under ``directory`` in place and make the tree private (files 0600,
    directories 0700); returns the files that changed.

    The ranks run in the job's interpreter and write their logs and error files raw (they may import
    only the standard library), so the parent calls this once a launch has ended, before any check
    reads the files. Every file is scrubbed, binary or not: one NUL byte a rank printed must not keep an
    HF token in its log (a checkpoint shard left in a launch folder is scratch nobody reads again). A file
    is read in blocks (memory stays bounded for a rank that printed a gigabyte); one whose scrubbed copy
    cannot be written (a full disk) is removed rather than left with its secrets. Links are not followed.
    """
    changed: list[Path] = []
    for top, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(top) / name
            if not path.is_symlink() and path.is_file() and redact_file(path):
                changed.append(path)
    private_tree(directory)
    with contextlib.suppress(OSError):
        directory.chmod(PRIVATE_DIR_MODE)  # a launch's own directory, below the report directory
    return changed


BLOCK_BYTES = 8 * 1024 * 1024
"""How much of a file is scrubbed at a time; a block ends at a line end (or a blank) so no secret is cut."""


def redact_file(path: Path) -> bool:
    """Scrub one file in place; True when it changed (or had to be removed because its scrubbed copy could
    not be written). A first pass only looks (a file without secrets is never rewritten, so a full disk costs
    nothing there); a second writes the scrubbed copy to a private temporary file beside it, then renames."""
    try:
        with open(path, "rb") as source:
            if all(text == scrubbed for text, scrubbed in _scrubbed_blocks(source)):
                return False
    except OSError:
        return False
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError:
        return _remove_unscrubbed(path)
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as out:
            for _text, scrubbed in _scrubbed_blocks(source):
                _write_block(out, scrubbed.encode("utf-8", errors="surrogateescape"))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError:
        return _remove_unscrubbed(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return True


def _remove_unscrubbed(path: Path) -> bool:
    with contextlib.suppress(OSError):
        path.unlink()
    return True


def _scrubbed_blocks(source: IO[bytes]) -> Iterator[tuple[str, str]]:
    """(text, scrubbed text) per block of ``source``; undecodable bytes come back unchanged."""
    carry = b""
    while True:
        block = source.read(BLOCK_BYTES)
        data = carry + block
        cut = _safe_cut(data) if block else len(data)
        text = data[:cut].decode("utf-8", errors="surrogateescape")
        yield text, redact_text(text)
        carry = data[cut:]
        if not block:
            return


def _write_block(out: IO[bytes], data: bytes) -> None:
    out.write(data)


def _safe_cut(data: bytes) -> int:
    """Where a block may end: after its last line end, before a private key block that has not ended yet
    (0: read on), after its last blank when it holds no line end; never keeping more than four blocks back."""
    end = data.rfind(b"\n") + 1 or max(data.rfind(b" "), data.rfind(b"\t")) + 1
    begin = data.rfind(b"-----BEGIN ", 0, end)
    if begin >= 0 and data.find(b"-----END ", begin) < 0:
        end = data.rfind(b"\n", 0, begin) + 1
        return end if len(data) - end <= 4 * BLOCK_BYTES else len(data)
    return end if end > 0 and len(data) - end <= 4 * BLOCK_BYTES else len(data)
