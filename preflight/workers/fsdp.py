"""FSDP2 on every rank: ``fully_shard`` per block then the root, a few steps, a DCP round trip.

The optimizer is built after sharding (it must see the sharded parameters). On GPUs with bf16 the
blocks compute in bf16 and reduce gradients in fp32 (``MixedPrecisionPolicy``); CPU ranks stay in
fp32. Each rank trains on data of its own, so the reduce-scatter matters. The sharded state (model
and optimizer) is saved with ``torch.distributed.checkpoint`` by every rank, loaded into a fresh
model that started from other weights, compared shard by shard, and the directory is removed.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from preflight.workers import phases
from preflight.workers.common import WorkerContext

DEFAULT_STEPS = 5
LEARNING_RATE = 1e-2
DATA_SEED = 1000  # plus the rank: every rank trains on a batch of its own


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``--steps N`` and ``--checkpoint-dir DIR`` (default: ``checkpoint`` in the run directory)."""
    parser = argparse.ArgumentParser(prog="preflight.workers.fsdp")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    return parser.parse_args(list(argv))


def fsdp_api() -> tuple[Callable[..., Any], type, str]:
    """``fully_shard``, ``MixedPrecisionPolicy`` and where they were found (public since torch 2.6,
    ``torch.distributed._composable.fsdp`` in 2.4 and 2.5)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        return fully_shard, MixedPrecisionPolicy, "torch.distributed.fsdp"
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

        return fully_shard, MixedPrecisionPolicy, "torch.distributed._composable.fsdp"
    except ImportError:
        import torch

        raise RuntimeError(f"torch {torch.__version__} has no FSDP2 fully_shard (needs torch >= 2.4)") from None


def numpy_problem() -> str | None:
    """Why torch cannot use numpy, or None. DCP exchanges its save and load plans with object
    collectives, which convert tensors through numpy; without it every save crashes."""
    import torch

    try:
        torch.zeros(1).numpy()
    except (RuntimeError, ImportError) as exc:
        return (f"torch cannot use numpy ({exc}): torch.distributed.checkpoint exchanges its plans with object "
                "collectives, which need numpy")
    return None


def shard_model(model: Any, mesh: Any, policy: Any) -> Any:
    """``fully_shard`` on each block, then on the root (embedding, norm and head)."""
    fully_shard, _, _ = fsdp_api()
    kwargs = {"mesh": mesh} if policy is None else {"mesh": mesh, "mp_policy": policy}
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def gathered_parameters(model: Any) -> list[tuple[str, Any]]:
    """Every parameter gathered in full (an all-gather per parameter, the same order on every rank)."""
    return [(name, param.full_tensor()) for name, param in model.named_parameters()]


def local_shards(model: Any) -> list[tuple[str, Any]]:
    """This rank's shard of every parameter."""
    return [(name, param.to_local()) for name, param in model.named_parameters()]


def state_digests(state: Any, prefix: str = "") -> dict[str, str]:
    """Flatten a (model or optimizer) state dict to ``path -> sha256`` of this rank's local data."""
    import hashlib

    import torch

    from preflight.workers.digest import tensor_digest

    if isinstance(state, dict):
        out: dict[str, str] = {}
        for key in sorted(state, key=str):
            out.update(state_digests(state[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(state, (list, tuple)):
        out = {}
        for index, item in enumerate(state):
            out.update(state_digests(item, f"{prefix}[{index}]"))
        return out
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return {prefix: tensor_digest(local)}
    return {prefix: hashlib.sha256(repr(state).encode()).hexdigest()}


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """The collective save every rank calls (a save called by only some ranks hangs the others)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state, checkpoint_id=str(path))


def load_checkpoint(state: dict[str, Any], path: Path) -> None:
    """The collective load every rank calls; fills ``state`` in place."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, checkpoint_id=str(path))


def checkpoint_round_trip(ctx: WorkerContext, model: Any, optimizer: Any, fresh: Callable[[], tuple[Any, Any]],
                          probe: Callable[[Any], float], path: Path) -> dict[str, Any]:
    """Save, load into ``fresh()``, compare every local tensor, remove; facts only."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from preflight.workers.tiny_model import differences, timed

    problem = numpy_problem()
    if problem is not None:
        return {"available": False, "reason": problem, "path": str(path)}
    ctx.progress(phases.CHECKPOINT_SAVE)
    model_state, optim_state = get_state_dict(model, optimizer)
    saved = state_digests({"model": model_state, "optim": optim_state})
    _, save_s = timed(ctx, lambda: save_checkpoint({"model": model_state, "optim": optim_state}, path))
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())

    ctx.progress(phases.CHECKPOINT_LOAD)
    new_model, new_optimizer = fresh()
    fresh_model_state, fresh_optim_state = get_state_dict(new_model, new_optimizer)
    before = state_digests({"model": fresh_model_state})
    state: dict[str, Any] = {"model": fresh_model_state, "optim": fresh_optim_state}

    def load() -> None:
        load_checkpoint(state, path)
        set_state_dict(new_model, new_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    _, load_s = timed(ctx, load)

    ctx.progress(phases.CHECKPOINT_VERIFY)
    loaded_model_state, loaded_optim_state = get_state_dict(new_model, new_optimizer)
    loaded = state_digests({"model": loaded_model_state, "optim": loaded_optim_state})
    mismatched = differences(saved, loaded)
    probe_after = probe(new_model)

    ctx.progress(phases.CHECKPOINT_REMOVE)
    dist.barrier()
    if ctx.rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    return {"available": True, "path": str(path), "save_s": save_s, "load_s": load_s, "bytes": size,
            "tensors": len(saved), "mismatched": mismatched[:5], "mismatched_count": len(mismatched),
            "differed_before_load": any(before[k] != saved.get(k) for k in before),
            "probe_loss_after_load": probe_after, "removed": not path.exists() if ctx.rank == 0 else None}


CPU_MIN_TORCH = (2, 7)  # = preflight.judge.strategies.FSDP2_CPU_MIN_TORCH (workers import no judge)


def cpu_ranks_unsupported(version: str) -> bool:
    """FSDP2 on CPU ranks before torch 2.7 fails in CUDA stream calls: the check skips it, saying why."""
    parts = version.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) < CPU_MIN_TORCH
    except (IndexError, ValueError):
        return False


def run(ctx: WorkerContext) -> dict[str, Any]:
    """A few FSDP2 steps and a checkpoint round trip; returns losses, timings, memory and digests.
    Returns at once on CPU ranks of a torch that cannot run FSDP2 there: the launch is planned before
    the job's torch version is known, and the check skips this phase on that version."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from preflight.workers import tiny_model as tm

    if not ctx.on_gpu and cpu_ranks_unsupported(str(torch.__version__)):
        return {"strategy": "fsdp", "not_run": f"torch {torch.__version__} cannot run FSDP2 on CPU ranks"}
    args = parse_args(ctx.args)
    _, policy_type, api = fsdp_api()
    bf16 = tm.bf16_supported(ctx)
    policy = policy_type(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    spec = tm.ModelSpec()
    if ctx.on_gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)

    ctx.progress(phases.BUILD)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))

    def build(seed: int) -> tuple[Any, Any]:
        model = shard_model(tm.TinyTransformer(spec, seed).to(ctx.device), mesh, policy)
        return model, torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

    model, optimizer = build(tm.MODEL_SEED)
    tokens = tm.token_batch(spec, DATA_SEED + ctx.rank, ctx.device)

    ctx.progress(phases.STEPS)
    losses: list[float] = []
    local_losses: list[float] = []
    step_times: list[float] = []
    for _ in range(args.steps):
        def step() -> float:
            loss = tm.lm_loss(model, tokens)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return float(loss.detach())

        local, seconds = tm.timed(ctx, step)
        local_losses.append(local)
        step_times.append(seconds)
        losses.append(sum(tm.every_rank(ctx, local)) / ctx.world_size)

    ctx.progress(phases.AGREEMENT)
    probe_tokens = tm.token_batch(spec, tm.PROBE_SEED, ctx.device)

    def probe(m: Any) -> float:
        with torch.no_grad():
            loss = float(tm.lm_loss(m, probe_tokens))
        m.reshard()  # without a backward the root keeps its parameters gathered
        return loss

    probe_loss = probe(model)
    digest, total = tm.named_digest(gathered_parameters(model))
    shard_digest, _ = tm.named_digest(local_shards(model))

    path = ctx.run_dir / (args.checkpoint_dir or "checkpoint")  # relative: inside the launch's own directory
    checkpoint = checkpoint_round_trip(ctx, model, optimizer, lambda: build(tm.FRESH_MODEL_SEED), probe, path)
    peak, memory_kind = tm.peak_memory(ctx)
    return {"strategy": "fsdp", "api": api, "precision": "bf16 compute, fp32 reduce" if bf16 else "fp32",
            **tm.summary(losses, step_times), "local_losses": local_losses, "probe_loss": probe_loss,
            "param_sha256": digest, "param_sum": total, "shard_sha256": shard_digest,
            "parameters": sum(p.numel() for p in model.parameters()), "peak_memory_bytes": peak,
            "memory_kind": memory_kind, "checkpoint": checkpoint}

