"""The tiny transformer-like model and the measurements every strategy worker shares.

The model has the shape that matters to sharding (an embedding, a stack of pre-norm attention and
MLP blocks, a head), so FSDP and ZeRO communicate per block as they do in a real job, but it is
small enough that a few steps take well under a second on a CPU rank.
"""

from __future__ import annotations

import hashlib
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from preflight.workers.common import WorkerContext
from preflight.workers.digest import tensor_digest

T = TypeVar("T")

MODEL_SEED = 1234
FRESH_MODEL_SEED = 4321  # the model a checkpoint is loaded into starts from other weights
PROBE_SEED = 777  # the same probe batch on every rank: its loss must agree across ranks


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Sizes of the tiny model and its batch."""

    vocab: int = 128
    dim: int = 64
    layers: int = 4
    heads: int = 4
    seq: int = 32
    batch: int = 4


class Block(nn.Module):
    """Pre-norm causal self-attention and MLP: the unit ``fully_shard`` wraps."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads = spec.heads
        self.attn_norm = nn.LayerNorm(spec.dim)
        self.qkv = nn.Linear(spec.dim, 3 * spec.dim)
        self.out = nn.Linear(spec.dim, spec.dim)
        self.mlp_norm = nn.LayerNorm(spec.dim)
        self.up = nn.Linear(spec.dim, 4 * spec.dim)
        self.down = nn.Linear(4 * spec.dim, spec.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(batch, seq, 3, self.heads, dim // self.heads).unbind(2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, dim))
        out: torch.Tensor = x + self.down(F.gelu(self.up(self.mlp_norm(x))))
        return out


class TinyTransformer(nn.Module):
    """Embedding, ``layers`` blocks, final norm and head; weights fixed by ``seed``."""

    def __init__(self, spec: ModelSpec, seed: int = MODEL_SEED) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab, spec.dim)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.layers))
        self.norm = nn.LayerNorm(spec.dim)
        self.head = nn.Linear(spec.dim, spec.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch * seq, vocab). Flat on purpose: a linear layer over a 3-D input returns a
        view of its 2-D result, and FSDP2 warns on every forward of a wrapped module that returns a view
        (torch 2.13, ``_fsdp_state.py`` ``_register_pre_backward_hook``), which ``PYTHONWARNINGS=error``
        turns into a crash of preflight's own rehearsal."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.norm(x).flatten(0, 1))
        return logits


def token_batch(spec: ModelSpec, seed: int, device: torch.device) -> torch.Tensor:
    """A fixed batch of ``seq + 1`` tokens per row (inputs and next-token targets)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, spec.vocab, (spec.batch, spec.seq + 1), generator=generator).to(device)


def lm_loss(model: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, computed in fp32 whatever the compute precision."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def bf16_supported(ctx: WorkerContext) -> bool:
    """bf16 compute only on GPUs that do it natively (compute capability 8.0+); CPU ranks stay in fp32.

    ``torch.cuda.is_bf16_supported()`` counts emulation by default (``including_emulation=True``: a
    bf16 tensor can be created, so V100 and T4 say yes); ``including_emulation=False`` keeps native
    support only. The argument is in every torch of the declared range (read in 2.4.1 and 2.13.0)."""
    return ctx.on_gpu and bool(torch.cuda.is_bf16_supported(including_emulation=False))


def synchronize(ctx: WorkerContext) -> None:
    """Wait for queued GPU work so a timing covers it."""
    if ctx.on_gpu:
        torch.cuda.synchronize(ctx.device)


def timed(ctx: WorkerContext, work: Callable[[], T]) -> tuple[T, float]:
    """Run ``work`` and return its result and wall seconds (GPU work included)."""
    start = time.perf_counter()
    result = work()
    synchronize(ctx)
    return result, time.perf_counter() - start


def every_rank(ctx: WorkerContext, value: float) -> list[float]:
    """``value`` from every rank, in rank order (an all-gather; no object collectives, no numpy)."""
    mine = torch.tensor([value], dtype=torch.float64, device=ctx.device)
    gathered = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, mine)
    return [float(t.item()) for t in gathered]


def peak_memory(ctx: WorkerContext) -> tuple[int, str]:
    """GPU: the allocator's peak; CPU: the process's peak resident set size. Returns (bytes, kind)."""
    if ctx.on_gpu:
        return int(torch.cuda.max_memory_allocated(ctx.device)), "cuda_max_memory_allocated"
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "cpu_peak_rss"


def named_digest(named: Iterable[tuple[str, torch.Tensor]]) -> tuple[str, float]:
    """One sha256 over every (name, tensor) in order, and the float64 sum of all values (for people)."""
    digest = hashlib.sha256()
    total = 0.0
    for name, tensor in named:
        digest.update(name.encode())
        digest.update(tensor_digest(tensor).encode())
        total += float(tensor.detach().double().sum())
    return digest.hexdigest(), total


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Names whose digests differ, or that exist on one side only."""
    return [name for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]


def summary(losses: list[float], step_times: list[float]) -> dict[str, Any]:
    """The figures every strategy reports about its steps."""
    steady = sorted(step_times[1:] or step_times)
    return {"losses": losses, "step_times_s": step_times, "step_time_s": steady[len(steady) // 2],
            "first_step_time_s": step_times[0] if step_times else None}
