"""DeepSpeed ZeRO stage 1, 2 or 3 on every rank: initialize, a few steps, a checkpoint round trip.

``deepspeed.initialize`` gets a generated config (micro batch, gradient accumulation, bf16 where
the GPU supports it, the stage). Its ops are loaded first, each timed, under the label
:data:`~preflight.workers.phases.OP_LOAD`, from preflight's own extensions folder (the one
``preflight.probe.deepspeed_ops`` builds into, found from the same environment; never the user's
``TORCH_EXTENSIONS_DIR``), holding its root's lock shared, so no build cleans a lock a rank holds and
a rank waits while a build runs. In a rehearsal the build runs beside the launch, and the
:func:`ops_phase` (phase ``deepspeed_ops``, before the ZeRO phases) is where the ranks wait for it:
a rank still there at the deadline is a slow build, not a hang. A build failure is re-raised with
the compiler's message found in the rank's log. Every rank calls
``save_checkpoint`` (it synchronises inside: a save called on rank 0 only hangs), then a fresh
engine that started from other weights calls ``load_checkpoint``, and the gathered parameters and
the loss on a shared probe batch are compared with the saved ones.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from preflight.parse.op_build import find_op_build_failure
from preflight.probe.deepspeed_ops import LOCK_NAME, STATUS_NAME, ZERO_BUILDERS, extensions_root
from preflight.workers import phases
from preflight.workers.common import WorkerContext

DEFAULT_STEPS = 4
DEFAULT_ACCUMULATION = 2
LEARNING_RATE = 1e-2
DATA_SEED = 2000
CHECKPOINT_TAG = "preflight"


class OpBuildError(RuntimeError):
    """DeepSpeed could not build one of its ops; the message quotes the compiler."""


def zero_config(*, stage: int, micro_batch: int, accumulation: int, world_size: int, bf16: bool,
                learning_rate: float = LEARNING_RATE) -> dict[str, Any]:
    """The DeepSpeed config of the rehearsal. ZeRO-3 shards even the tiny parameters (threshold 0),
    so every layer's all-gather is exercised as in a large model."""
    if stage not in (1, 2, 3):
        raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {stage}")
    if micro_batch < 1 or accumulation < 1 or world_size < 1:
        raise ValueError(f"micro batch, accumulation and world size must be >= 1, got "
                         f"{micro_batch}, {accumulation}, {world_size}")
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        zero["stage3_param_persistence_threshold"] = 0
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "train_batch_size": micro_batch * accumulation * world_size,
        "optimizer": {"type": "AdamW", "params": {"lr": learning_rate, "weight_decay": 0.0}},
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "gradient_clipping": 1.0,
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``--stage N --steps N --accumulation N --checkpoint-dir DIR``."""
    parser = argparse.ArgumentParser(prog="preflight.workers.zero")
    parser.add_argument("--stage", type=int, required=True, choices=(1, 2, 3))
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--accumulation", type=int, default=DEFAULT_ACCUMULATION)
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    return parser.parse_args(list(argv))


def op_build_error(ctx: WorkerContext, exc: BaseException) -> OpBuildError | None:
    """An :class:`OpBuildError` quoting the compiler when ``exc`` is a JIT build failure."""
    try:
        log = (ctx.run_dir / f"rank{ctx.rank}.log").read_text(errors="replace")
    except OSError:
        log = ""
    failure = find_op_build_failure(f"{log}\n{type(exc).__name__}: {exc}")
    return OpBuildError(failure.describe()) if failure is not None else None


@contextlib.contextmanager
def shared_lock(ctx: WorkerContext, lock: Path, waiting_for: str) -> Iterator[None]:
    """Hold ``lock`` shared; wait (saying for what) while a build holds it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            ctx.progress(f"{phases.OP_LOAD}: waiting for {waiting_for}")
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def ops_folder() -> tuple[Path, Path]:
    """``(folder, lock)``: preflight's extensions folder for this interpreter, and the folder's lock (worked
    out once per rank: the key asks the compiler for its version)."""
    from preflight.probe.op_build_child import extensions_directory

    folder = Path(extensions_directory(str(extensions_root(os.environ))))
    return folder, folder / LOCK_NAME


def build_status(folder: Path) -> dict[str, Any] | None:
    """What the last build in ``folder`` wrote (``ok``, ``error``), None when none did."""
    try:
        data = json.loads((folder / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_ops(ctx: WorkerContext) -> list[dict[str, Any]]:
    """Load the ops ``deepspeed.initialize`` will ask for, as it would (same builders, same skips),
    timing each; DeepSpeed keeps them loaded (``OpBuilder._loaded_ops``) so initialize reuses them.
    An op whose library the build's manifest vouches for is imported from it directly (no ninja run,
    no compile flags worked out: :mod:`preflight.probe.op_cache`); one the manifest does not list is
    loaded by DeepSpeed itself. A build that failed or ran out of time in this folder is raised at
    once, not retried here; a library that no longer verifies is raised with how to clear it."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder.builder import OpBuilder

    from preflight.probe import op_cache
    from preflight.probe.op_build_child import import_library

    folder, lock = ops_folder()
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)  # torch reads it when it loads (_get_build_directory)
    accelerator = get_accelerator()
    loaded = []
    with shared_lock(ctx, lock, f"another preflight's build in {folder}"):
        status = build_status(folder)
        if status is not None and not status.get("ok"):
            raise OpBuildError(f"DeepSpeed's ops were not built by preflight ({folder}): {status.get('error')}")
        vouched = {str(op.get("name")): op for op in (status or {}).get("ops") or ()
                   if isinstance(op, dict) and op.get("library")}
        for entry in ZERO_BUILDERS:
            builder = accelerator.create_op_builder(entry["builder"])
            if builder is None or (entry.get("optional")
                                   and not deepspeed.ops.__compatible_ops__.get(builder.NAME, False)):
                continue
            if builder.name in OpBuilder._loaded_ops:  # an earlier phase of this rank loaded it
                loaded.append({"op": builder.name, "seconds": 0.0, "from": "loaded"})
                continue
            ctx.progress(f"{phases.OP_LOAD}: {builder.name}")
            start = time.perf_counter()
            record = vouched.get(builder.name)
            if record is None:
                builder.load(verbose=False)
            else:
                problem = op_cache.library_problem(str(folder), record)
                if problem is not None:
                    raise OpBuildError(f"DeepSpeed's op {builder.name} in preflight's cache is damaged ({problem}); "
                                       f"the next preflight run builds it again, or remove {folder}")
                import_library(builder, str(folder))
            loaded.append({"op": builder.name, "seconds": round(time.perf_counter() - start, 3),
                           "from": "manifest" if record is not None else "deepspeed"})
    return loaded


def ops_phase(ctx: WorkerContext) -> dict[str, Any]:
    """Phase ``deepspeed_ops`` of a rehearsal: wait for preflight's build (beside the launch), then load
    the ops, so the ZeRO phases after it start with them loaded. Returns the wait and the loads."""
    start = time.perf_counter()
    ctx.progress(phases.OP_LOAD)
    if "--cpu-info" in ctx.args:
        from preflight.probe.op_build_child import share_cpu_info

        share_cpu_info(ctx.args[ctx.args.index("--cpu-info") + 1])
    try:
        if "--build-lock" in ctx.args:  # this run's build beside the launch, while it runs
            with shared_lock(ctx, Path(ctx.args[ctx.args.index("--build-lock") + 1]), "preflight's build of them"):
                pass
        ops = load_ops(ctx)
    except OpBuildError:
        raise  # preflight's own build failed: its status already quotes the compiler
    except Exception as exc:
        build = op_build_error(ctx, exc)
        if build is not None:
            raise build from exc
        raise
    return {"ops": ops, "seconds": round(time.perf_counter() - start, 3)}


def save_checkpoint(engine: Any, path: Path) -> None:
    """The collective save every rank calls (DeepSpeed synchronises inside it)."""
    engine.save_checkpoint(str(path), tag=CHECKPOINT_TAG)


def parameter_digests(engine: Any, stage: int) -> dict[str, str]:
    """``name -> sha256`` of every parameter in full (ZeRO-3 gathers them first, on every rank)."""
    import deepspeed

    from preflight.workers.digest import tensor_digest

    named = list(engine.module.named_parameters())
    if stage != 3:
        return {name: tensor_digest(param) for name, param in named}
    with deepspeed.zero.GatheredParameters([param for _, param in named], modifier_rank=None):
        return {name: tensor_digest(param) for name, param in named}


def run(ctx: WorkerContext) -> dict[str, Any]:
    """A few ZeRO steps and a checkpoint round trip; returns losses, timings, memory and digests."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from preflight.workers import tiny_model as tm

    args = parse_args(ctx.args)
    bf16 = tm.bf16_supported(ctx)
    spec = tm.ModelSpec()
    config = zero_config(stage=args.stage, micro_batch=spec.batch, accumulation=args.accumulation,
                         world_size=ctx.world_size, bf16=bf16)
    if ctx.on_gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)

    def engine_from(seed: int) -> Any:
        model = tm.TinyTransformer(spec, seed)
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        return engine

    tokens = tm.token_batch(spec, DATA_SEED + ctx.rank, ctx.device)
    losses: list[float] = []
    step_times: list[float] = []
    try:
        ctx.progress(phases.OP_LOAD)
        ops = load_ops(ctx)
        ctx.progress(f"{phases.BUILD}: deepspeed.initialize")
        engine = engine_from(tm.MODEL_SEED)
        ctx.progress(phases.STEPS)
        for _ in range(args.steps):
            def step() -> float:
                total = 0.0
                for _ in range(args.accumulation):
                    loss = tm.lm_loss(engine, tokens)
                    engine.backward(loss)
                    engine.step()
                    total += float(loss.detach())
                return total / int(args.accumulation)  # argparse: type=int

            local, seconds = tm.timed(ctx, step)
            step_times.append(seconds)
            losses.append(local)
    except Exception as exc:
        build = op_build_error(ctx, exc)
        if build is not None:
            raise build from exc
        raise
    global_losses = [sum(tm.every_rank(ctx, value)) / ctx.world_size for value in losses]

    ctx.progress(phases.AGREEMENT)
    probe_tokens = tm.token_batch(spec, tm.PROBE_SEED, ctx.device)

    def probe(e: Any) -> float:
        with torch.no_grad():
            return float(tm.lm_loss(e, probe_tokens))

    probe_loss = probe(engine)
    saved = parameter_digests(engine, args.stage)
    digest = _combined(saved)

    path = ctx.run_dir / (args.checkpoint_dir or "checkpoint")  # relative: inside the launch's own directory
    ctx.progress(phases.CHECKPOINT_SAVE)
    _, save_s = tm.timed(ctx, lambda: save_checkpoint(engine, path))
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())

    ctx.progress(phases.CHECKPOINT_LOAD)
    fresh = engine_from(tm.FRESH_MODEL_SEED)
    before = parameter_digests(fresh, args.stage)
    (loaded_path, _), load_s = tm.timed(ctx, lambda: fresh.load_checkpoint(str(path), tag=CHECKPOINT_TAG))

    ctx.progress(phases.CHECKPOINT_VERIFY)
    loaded = parameter_digests(fresh, args.stage)
    mismatched = tm.differences(saved, loaded)
    probe_after = probe(fresh)

    ctx.progress(phases.CHECKPOINT_REMOVE)
    dist.barrier()
    if ctx.rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    peak, memory_kind = tm.peak_memory(ctx)
    checkpoint = {"available": loaded_path is not None, "reason": None if loaded_path else
                  "load_checkpoint found no checkpoint to load", "path": str(path), "save_s": save_s,
                  "load_s": load_s, "bytes": size, "tensors": len(saved), "mismatched": mismatched[:5],
                  "mismatched_count": len(mismatched), "differed_before_load": before != saved,
                  "probe_loss_after_load": probe_after, "removed": not path.exists() if ctx.rank == 0 else None}
    return {"strategy": f"zero{args.stage}", "api": f"deepspeed {getattr(deepspeed, '__version__', '?')}",
            "precision": "bf16" if bf16 else "fp32", "config": config, "ops": ops,
            "accelerator": _accelerator_name(),
            **tm.summary(global_losses, step_times), "local_losses": losses, "probe_loss": probe_loss,
            "param_sha256": digest,
            "parameters": sum(getattr(p, "ds_numel", p.numel()) for p in engine.module.parameters()),
            "peak_memory_bytes": peak, "memory_kind": memory_kind, "checkpoint": checkpoint}


def _accelerator_name() -> str:
    from deepspeed.accelerator import get_accelerator

    return str(get_accelerator().device_name())


def _combined(digests: dict[str, str]) -> str:
    """One sha256 over every parameter's digest, in name order."""
    import hashlib

    combined = hashlib.sha256()
    for name in sorted(digests):
        combined.update(f"{name}={digests[name]};".encode())
    return combined.hexdigest()

