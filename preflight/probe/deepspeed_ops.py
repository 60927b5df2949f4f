"""Build the DeepSpeed ops a ZeRO rehearsal loads, ahead of its launch, in preflight's own cache.

DeepSpeed JIT-builds its ops the first time a job uses them (``deepspeed.initialize`` builds the
optimizer's fused Adam; on the CPU accelerator also the shared-memory all-reduce). A first build
takes minutes (130 s for both CPU ops on a quiet 2-core machine, more under load), so doing it
inside a rank under a launch deadline made a slow compile look like a hung rank, and killing it
there left torch's build lock behind in the user's own ``~/.cache/torch_extensions``. Here the
build runs once, in a child process with its own budget (``--op-build-timeout``), in a directory
of preflight's own (:func:`extensions_root`; the ranks find the same folder from the same
environment). :class:`BackgroundOpBuild` starts it together with the rehearsal launch, holding the
run's build lock from the start: the launch's ``deepspeed_ops`` phase waits on that lock while the
DDP, sweep and FSDP phases run, then loads the built ops. Compiled objects survive a killed build
(ninja keeps finished outputs), so the next run resumes rather than starts over. A build this
environment left and that still verifies (:mod:`preflight.probe.op_cache`) starts no child at all.

The child is ``op_build_child.py`` (its docstring cites the DeepSpeed and torch lines it follows);
it runs as a plain file so it needs nothing but torch and DeepSpeed in the job's environment.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from preflight.locations import cache_folder
from preflight.probe import op_cache
from preflight.probe.command import CommandRunner
from preflight.probe.job_python import script_argv
from preflight.waits import waiting

EXTENSIONS_DIR_ENV = "PREFLIGHT_TORCH_EXTENSIONS_DIR"
CHILD = Path(__file__).with_name("op_build_child.py")
MARK = "PREFLIGHT_OP_BUILD"
LOCK_NAME = "preflight.lock"
"""``<folder>/preflight.lock``: a build holds it exclusively, the ranks shared while they load."""
RUN_LOCK_NAME = "op-build.lock"
"""``<report dir>/logs/op-build.lock``: held while this run's build runs beside its launch."""
STATUS_NAME = op_cache.MANIFEST_NAME
DEFAULT_TIMEOUT_S = 600.0
WAITING_FOR = "DeepSpeed's op build (a first build takes minutes; later runs reuse it)"

class _Builder(TypedDict):
    builder: str  # the class name ``accelerator.create_op_builder`` takes: ``FusedAdamBuilder``


class BuilderSpec(_Builder, total=False):
    """One op for the child (and the ranks) to load: its builder, ``optional`` when DeepSpeed loads it only
    where ``deepspeed.ops.__compatible_ops__`` says the op is compatible."""

    optional: bool


ZERO_BUILDERS: tuple[BuilderSpec, ...] = (
    # deepspeed/comm/torch.py TorchBackend.__init__ -> build_shm_op(): CPU accelerator only, loaded
    # when deepspeed.ops.__compatible_ops__ says so (the CUDA accelerator has no such builder).
    {"builder": "ShareMemCommBuilder", "optional": True},
    # runtime/engine.py get_optimizer_configuration: the "AdamW" optimizer of our config is FusedAdam,
    # whose constructor calls FusedAdamBuilder().load() (CUDA: nvcc; CPU accelerator: C++).
    {"builder": "FusedAdamBuilder"},
)
"""The ops ``deepspeed.initialize`` loads for the rehearsal's config, in the order it loads them."""


def extensions_root(env: Mapping[str, str]) -> Path:
    """``$PREFLIGHT_TORCH_EXTENSIONS_DIR``, else ``$XDG_CACHE_HOME/preflight/torch_extensions`` (default
    ``~/.cache/preflight/torch_extensions``): never the user's own ``~/.cache/torch_extensions``. A default
    that cannot be written (a read-only HOME, HOME a file) is replaced by ``<tmp>/preflight-<uid>/
    torch_extensions`` (``locations.cache_folder``; the ranks reach the same answer from the same environment)."""
    if env.get(EXTENSIONS_DIR_ENV):
        return Path(env[EXTENSIONS_DIR_ENV]).expanduser()
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return cache_folder(Path(cache) / "preflight" / "torch_extensions", "torch_extensions")


@dataclass(frozen=True, slots=True)
class OpLoad:
    """One op as the child loaded it."""

    builder: str
    name: str
    accelerator: str
    source: str
    """``built`` (compiled now), ``cached`` (built before, loaded), ``verified`` (built before, its library
    checked against the manifest without starting a child), ``prebuilt`` (in the wheel), ``failed``,
    ``incompatible`` or ``absent`` (DeepSpeed would not load it here either)."""
    seconds: float = 0.0
    device: str = ""
    """``cuda`` when nvcc compiled it, ``cpu`` for a C++-only build."""
    compilers: tuple[str, ...] = ()
    builder_class: str = ""
    module: str | None = None
    error: str | None = None
    reason: str | None = None

    @property
    def loaded(self) -> bool:
        """True when the op is ready to load (or DeepSpeed would not load it here)."""
        return self.source != "failed"

    def describe(self) -> str:
        """``fused_adam (CPU, c++) built in 84 s``."""
        if self.source in ("absent", "incompatible"):
            return f"{self.name or self.builder} not used here ({self.reason})"
        tools = ", ".join(os.path.basename(tool) for tool in self.compilers) or "no compiler"
        what = f"{self.name} ({self.device.upper() or '?'}, {tools})"
        if self.source == "failed":
            return f"{self.name or self.builder} failed after {self.seconds:.0f} s: {self.error}"
        if self.source == "verified":
            return f"{what} found built in preflight's cache (size and sha256 as the build left them)"
        verb = {"built": "built in", "cached": "loaded from preflight's cache in",
                "prebuilt": "loaded pre-built from the DeepSpeed wheel in"}.get(self.source, self.source)
        return f"{what} {verb} {_seconds(self.seconds)}"


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


@dataclass(frozen=True, slots=True)
class OpBuild:
    """What the build child did: every op, the directory, the deadline and the log."""

    directory: str | None
    accelerator: str | None
    ops: tuple[OpLoad, ...]
    ok: bool
    timed_out: bool
    busy: bool
    duration_s: float
    budget_s: float
    returncode: int | None
    output: str
    stale_locks: tuple[str, ...] = ()
    versions: Mapping[str, str] | None = None
    repaired: tuple[str, ...] = ()
    """Cached libraries that did not verify (cut short, changed) and were built again."""
    unusable: str | None = None
    """Why the op cache could not be created (a regular file on its path, a read-only disk); no child ran."""

    @property
    def built(self) -> tuple[OpLoad, ...]:
        """Ops compiled by this run (a first build)."""
        return tuple(op for op in self.ops if op.source == "built")

    @property
    def failed(self) -> OpLoad | None:
        """The op whose build or load failed, if any."""
        return next((op for op in self.ops if op.source == "failed"), None)

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the build's output, without the child's own fact lines."""
        kept = [line for line in self.output.splitlines() if not line.startswith(MARK)]
        return "\n".join(kept[-lines:])


def parse_child_output(stdout: str) -> list[dict[str, Any]]:
    """The child's fact lines, in order (other lines are the build's own output)."""
    facts = []
    for line in stdout.splitlines():
        if line.startswith(MARK + " "):
            try:
                facts.append(json.loads(line[len(MARK) + 1:]))
            except json.JSONDecodeError:
                continue
    return facts


def _op(fact: Mapping[str, Any]) -> OpLoad:
    return OpLoad(builder=str(fact.get("builder", "")), name=str(fact.get("name") or fact.get("builder", "")),
                  accelerator=str(fact.get("accelerator", "")), source=str(fact.get("source", "")),
                  seconds=float(fact.get("seconds") or 0.0), device=str(fact.get("device") or ""),
                  compilers=tuple(fact.get("compilers") or ()), builder_class=str(fact.get("builder_class") or ""),
                  module=fact.get("module"), error=fact.get("error"), reason=fact.get("reason"))


def build_ops(builders: Sequence[BuilderSpec] = ZERO_BUILDERS, *, timeout_s: float = DEFAULT_TIMEOUT_S,
              root: Path | None = None, directory: Path | None = None, jit: bool = False,
              runner: CommandRunner, python: str, env: Mapping[str, str], cpu_info: Path | None = None,
              lock_wait_s: float | None = None) -> OpBuild:
    """Load (building when needed) ``builders`` in a child interpreter under ``timeout_s``; never raises.
    The build this environment left, when it verifies, answers without a child (:func:`cached_build`).

    ``root`` holds one folder per Python/torch/DeepSpeed/accelerator/compiler (default
    :func:`extensions_root`); ``directory`` forces one folder (the ``--slow`` check builds in a fresh
    temporary one); ``jit`` calls ``jit_load`` so an op pre-built into the wheel is compiled anyway;
    ``cpu_info``: where the child leaves py-cpuinfo's answer for the ranks
    (:func:`~preflight.probe.op_build_child.share_cpu_info`). The child holds the folder's own lock
    (``<folder>/preflight.lock``) exclusively while it builds there; ranks load holding it shared.
    ``lock_wait_s``: how long the child waits for that lock when another preflight holds it before it
    reports the folder busy (default half of ``timeout_s``).
    """
    base = dict(env)
    top = root or extensions_root(base)
    if directory is None and not jit:
        cached = cached_build(python, base, top, timeout_s)
        if cached is not None:
            return cached
    try:
        top.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return OpBuild(directory=None, accelerator=None, ops=(), ok=False, timed_out=False, busy=False,
                       duration_s=0.0, budget_s=timeout_s, returncode=None, output="",
                       unusable=f"cannot create the op cache {top}: {exc.strerror or exc}")
    wait_s = max(1.0, timeout_s / 2) if lock_wait_s is None else lock_wait_s
    spec: dict[str, Any] = {"builders": list(builders), "jit": jit, "lock_wait_s": wait_s,
                            "root": str(top)}
    if directory is not None:
        spec["directory"] = str(directory)
    if cpu_info is not None:
        spec["cpu_info"] = str(cpu_info)
    if directory is None:  # the child remembers the folder for this environment (see cached_build)
        spec["identity"] = op_cache.identity(python, base)
    child_env = {**base, "PYTHONUNBUFFERED": "1"}
    child_env.pop("TORCH_EXTENSIONS_DIR", None)  # the child sets its own; never the user's
    result = runner(script_argv(python, CHILD, json.dumps(spec)), timeout_s=timeout_s, env=child_env)
    facts = parse_child_output(result.stdout)
    start = next((fact for fact in facts if fact.get("kind") == "start"), {})
    folder = start.get("directory")
    ops = tuple(_op(fact) for fact in facts if fact.get("kind") == "op")
    stale = tuple(str(item.get("path")) for fact in facts if fact.get("kind") == "stale"
                  for item in fact.get("removed") or ())
    if result.timed_out and folder:
        _write_status(Path(folder), ok=False, error=f"the build did not finish within its {timeout_s:.0f} s budget")
        stale += tuple(remove_stale_locks(Path(folder)))
    output = "\n".join(part for part in (result.stdout, result.stderr) if part)
    done = any(fact.get("kind") == "done" for fact in facts)
    versions: dict[str, str] = {key: str(start[key]) for key in ("torch", "deepspeed") if key in start}
    repaired = tuple(f"{fact.get('name')}: {fact.get('problem')}" for fact in facts if fact.get("kind") == "damaged")
    return OpBuild(directory=folder, accelerator=start.get("accelerator"), ops=ops,
                   ok=result.ok and done and all(op.loaded for op in ops), timed_out=result.timed_out,
                   busy=any(fact.get("kind") == "busy" for fact in facts), duration_s=result.duration_s,
                   budget_s=timeout_s, returncode=result.returncode, output=output, stale_locks=stale,
                   versions=versions, repaired=repaired)


def cached_build(python: str, env: Mapping[str, str], root: Path, budget_s: float) -> OpBuild | None:
    """The build this environment (``python`` with ``env``) left in ``root``, when its torch and DeepSpeed
    files are unchanged and every library verifies (:mod:`preflight.probe.op_cache`); None otherwise
    (then the child runs). No torch, no child: a stat per watched file and a sha256 per library."""
    started = time.monotonic()
    folder = op_cache.environment_folder(str(root), op_cache.identity(python, env))
    if folder is None or glob.glob(os.path.join(folder, "*", "lock")):
        return None  # unknown here, or a killed build's torch lock to clear: the child does both
    manifest = op_cache.read_manifest(folder)
    ops = op_cache.trusted_ops(folder, manifest)
    if manifest is None or ops is None:
        return None
    loads = tuple(_op({**op, "source": "verified" if op.get("library") else op.get("source")}) for op in ops)
    versions = {key: str(manifest[key]) for key in ("torch", "deepspeed") if manifest.get(key)}
    return OpBuild(directory=folder, accelerator=str(manifest.get("accelerator") or "") or None, ops=loads, ok=True,
                   timed_out=False, busy=False, duration_s=time.monotonic() - started, budget_s=budget_s,
                   returncode=None, output=f"verified {folder}/{op_cache.MANIFEST_NAME}", versions=versions)


def _write_status(directory: Path, **status: Any) -> None:
    """What a killed build could not write itself: the ranks must not build under the launch instead."""
    path = directory / STATUS_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**status, "time": time.time()}))
    os.replace(tmp, path)


def _remove_locks(directory: Path) -> list[str]:
    removed = []
    for path in sorted(glob.glob(str(directory / "*" / "lock"))):
        try:
            os.remove(path)
        except OSError:
            continue
        removed.append(path)
    return removed


FOLDER_POLL_S = 0.05


def wait_for_folder(python: str, env: Mapping[str, str], root: Path, wait_s: float) -> float:
    """The seconds waited (at most ``wait_s``, 0.0 when nothing held it) for another preflight process to let
    go of this environment's folder, which it holds exclusively while it builds there or re-verifies its ops
    (its manifest is rewritten meanwhile). Asked when the cache did not answer: a build child would import
    torch and DeepSpeed (seconds of CPU beside the launch) only to wait for the same lock, then find the ops
    built; after this wait :func:`cached_build` is asked again. No torch: the folder is the environment's entry."""
    folder = op_cache.environment_folder(str(root), op_cache.identity(python, env))
    if folder is None:
        return 0.0
    try:
        fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDONLY)
    except OSError:
        return 0.0
    started = time.monotonic()
    held = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                held = True
                if time.monotonic() - started >= wait_s:
                    break
                time.sleep(FOLDER_POLL_S)
    finally:
        os.close(fd)  # a shared lock taken is released at once: the cache is read, nothing loaded here
    return time.monotonic() - started if held else 0.0


def try_lock(folder: Path, name: str = LOCK_NAME) -> int | None:
    """An exclusive flock on ``<folder>/preflight.lock`` taken without waiting (its fd), or None when another
    preflight process builds or loads in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove_stale_locks(directory: Path) -> list[str]:
    """After a killed build: remove the torch build locks it left in ``directory``, if no preflight process
    holds the folder (an exclusive flock taken without waiting); the paths removed."""
    if not (directory / LOCK_NAME).exists():
        return []
    fd = try_lock(directory)
    if fd is None:
        return []
    try:
        return _remove_locks(directory)
    finally:
        os.close(fd)


class BackgroundOpBuild:
    """A build started now, beside the rehearsal launch. Unless the build this environment left verifies
    (then nothing runs), this run's build lock (``run_lock``, a file of the run's own) is taken before
    :meth:`start` returns, so the launch's ranks, which wait on it before loading their ops, wait for
    this build rather than compile under their own deadline; a build of another folder, by another
    preflight in another environment, never holds them up. :meth:`result` waits for it."""

    def __init__(self, timeout_s: float, *, env: Mapping[str, str], runner: CommandRunner, python: str,
                 root: Path | None = None, cpu_info: Path | None = None, run_lock: Path | None = None) -> None:
        self.timeout_s = timeout_s
        self.cpu_info = cpu_info
        self.run_lock = run_lock
        self.env = dict(env)
        self.root = root or extensions_root(self.env)
        self.runner = runner
        self.python = python
        self._fd: int | None = None
        self._until: float | None = None
        self._thread: threading.Thread | None = None
        self._result: list[OpBuild] = []

    def start(self) -> None:
        """Take this run's build lock and start the build in a thread; or nothing at all, when the build
        this environment left verifies (:func:`cached_build`)."""
        if self._thread is not None or self._result:
            return
        cached = cached_build(self.python, self.env, self.root, self.timeout_s)
        if cached is not None:
            self._result.append(cached)
            return
        if self.run_lock is not None:
            self._fd = try_lock(self.run_lock.parent, self.run_lock.name)  # the run's own file: free
        self._until = time.monotonic() + self.timeout_s
        self._thread = threading.Thread(target=self._run, name="preflight-op-build", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            waited = wait_for_folder(self.python, self.env, self.root, max(1.0, self.timeout_s / 2))
            cached = cached_build(self.python, self.env, self.root, self.timeout_s) if waited else None
            self._result.append(cached or build_ops(timeout_s=max(1.0, self.timeout_s - waited), root=self.root,
                                                    runner=self.runner, python=self.python, env=self.env,
                                                    cpu_info=self.cpu_info))
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def result(self) -> OpBuild:
        """The build, once it has ended (it ends by its own deadline)."""
        self.start()
        if self._thread is not None and self._thread.is_alive():
            with waiting(WAITING_FOR, self._until):
                self._thread.join()
        if self._thread is not None:
            self._thread.join()
        return self._result[0]


def fresh_jit_build(builder: str = "FusedAdamBuilder", timeout_s: float = DEFAULT_TIMEOUT_S, *,
                    runner: CommandRunner, python: str, env: Mapping[str, str]) -> OpBuild:
    """Build one op from scratch with ``jit_load`` in a temporary directory (removed afterwards), so no
    cached or pre-built op can hide a broken toolkit: the ``--slow`` check."""
    with tempfile.TemporaryDirectory(prefix="preflight-jit-") as scratch:
        return build_ops(({"builder": builder},), timeout_s=timeout_s, root=Path(scratch),
                         directory=Path(scratch) / "build", jit=True, runner=runner, python=python, env=env)
