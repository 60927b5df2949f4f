"""The sizing model: bytes of model state per GPU for DDP, ZeRO-1/2/3 and FSDP full shard.

Rule (issue 8, after ml-engineering's training/performance README): mixed-precision Adam keeps
18 bytes per parameter before activations and temporary tensors:

* ``weights`` 2: the 16-bit (fp16/bf16) copy the forward and backward use;
* ``master`` 4: the fp32 master copy the optimizer updates;
* ``optimizer`` 8: Adam's fp32 momentum and variance;
* ``gradients`` 4: fp32 gradients.

The ZeRO paper (Rajbhandari et al. 2020, section 3.1) counts K = 12 bytes of "optimizer states"
(fp32 master, momentum, variance) plus 2 bytes of fp16 weights and 2 bytes of **fp16** gradients,
16 in all; the 18 here counts the gradients in fp32 (4) as many mixed-precision setups keep them.
``gradients=2`` gives the paper's 16. DeepSpeed's own estimators count both gradient copies
(``2P + 18P/n`` for ZeRO-2), so every split is an estimate: override it for other optimizers and
precisions.

What each strategy shards, as DeepSpeed and FSDP document:

* ``ddp``: nothing; every GPU holds all 18 bytes.
* ``zero1``: the optimizer state **and the fp32 master weights** (ZeRO stage 1 partitions the
  "optimizer states", which in DeepSpeed include the fp32 master copy).
* ``zero2``: as ZeRO-1, plus the gradients (DeepSpeed stage 2; FSDP ``SHARD_GRAD_OP`` is close).
* ``zero3``: everything, including the 16-bit weights; plus room to gather the largest layer.
* ``fsdp`` (``FULL_SHARD`` with ``MixedPrecision``): the sharded parameters are the fp32 ones
  (FSDP docs: "outside forward and backward, the sharded parameters are kept in full
  precision"), so there is no persistent 16-bit shard; the 16-bit copy exists only for the
  gathered unit.

Gather room for ``zero3`` and ``fsdp``: ``2 x weights`` bytes per parameter of the largest layer
(its gathered 16-bit weights and 16-bit gradients before the reduce-scatter), which is DeepSpeed's
``4 x largest_layer_params``. When the largest layer is unknown it is assumed to be
:data:`ASSUMED_LARGEST_LAYER_FRACTION` of the model, which covers two transformer blocks of a
7B model (the unit being gathered plus the one prefetched), but at most
:data:`ASSUMED_LARGEST_LAYER_CAP` parameters: large models have relatively small layers (the
largest layer of Llama 3.1 405B, its 128256 x 16384 embedding, is 2.1B parameters, 0.5 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from preflight.parse.quantity import QuantityError

ASSUMED_LARGEST_LAYER_FRACTION = Fraction(1, 10)
"""Largest layer when ``--largest-layer-params`` is not given: 10 % of the parameters ..."""

ASSUMED_LARGEST_LAYER_CAP = 2_500_000_000
"""... but never more than 2.5B parameters (covers a 405B model's 2.1B embedding)."""

COMPONENTS = ("weights", "master", "optimizer", "gradients")
"""The four parts of the per-parameter bytes, in the order they are printed."""

COMPONENT_MEANING = {
    "weights": "16-bit weights",
    "master": "fp32 master weights",
    "optimizer": "optimizer state (Adam m, v)",
    "gradients": "gradients",
}

STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3", "fsdp")
"""Least sharding first: the recommendation is the first of these that fits."""

STRATEGY_TITLES = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "fsdp": "FSDP full shard",
}

_SHARDED = {
    "ddp": (),
    "zero1": ("master", "optimizer"),
    "zero2": ("master", "optimizer", "gradients"),
    "zero3": ("weights", "master", "optimizer", "gradients"),
    "fsdp": ("master", "optimizer", "gradients"),
}


@dataclass(frozen=True, slots=True)
class BytesPerParam:
    """Bytes of model state per parameter, split by what each strategy may shard."""

    weights: Fraction = Fraction(2)
    master: Fraction = Fraction(4)
    optimizer: Fraction = Fraction(8)
    gradients: Fraction = Fraction(4)

    def __post_init__(self) -> None:
        for name in COMPONENTS:
            value = getattr(self, name)
            if value < 0:
                raise QuantityError(f"bytes per parameter for {name} must not be negative, got {value}")
        if self.total <= 0:
            raise QuantityError("bytes per parameter must add up to more than zero")

    @property
    def total(self) -> Fraction:
        """All four parts together (18 by default)."""
        return self.weights + self.master + self.optimizer + self.gradients

    def part(self, name: str) -> Fraction:
        """One part by name (``weights``, ``master``, ``optimizer``, ``gradients``)."""
        return Fraction(getattr(self, name))

    def checkpoint(self) -> Fraction:
        """Bytes per parameter of a checkpoint with optimizer state: all but the gradients."""
        return self.weights + self.master + self.optimizer

    def describe(self) -> str:
        """``18 bytes/param (weights 2 + master 4 + optimizer 8 + gradients 4)``."""
        parts = " + ".join(f"{name} {_number(self.part(name))}" for name in COMPONENTS)
        return f"{_number(self.total)} bytes/param ({parts})"

    def __str__(self) -> str:
        """The exact spec ``parse_bytes_per_param`` reads back (the CLI hands options on as text)."""
        return ",".join(f"{name}={self.part(name)}" for name in COMPONENTS)

    def as_dict(self) -> dict[str, float]:
        """JSON form: each part and the total, as numbers."""
        data = {name: float(self.part(name)) for name in COMPONENTS}
        data["total"] = float(self.total)
        return data


def parse_bytes_per_param(text: str) -> BytesPerParam:
    """``"16"`` (a total: the default split scaled to it) or ``"weights=2,gradients=2,..."``.

    Parts not named keep their defaults, so ``gradients=2`` gives the ZeRO paper's 16.
    """
    stripped = text.strip()
    if not stripped:
        raise QuantityError("bytes per parameter is empty")
    if "=" not in stripped:
        total = _non_negative(stripped, what="bytes per parameter")
        if total == 0:
            raise QuantityError("bytes per parameter must be greater than zero")
        default = BytesPerParam()
        scale = total / default.total
        return BytesPerParam(**{name: default.part(name) * scale for name in COMPONENTS})
    values: dict[str, Fraction] = {}
    for item in stripped.split(","):
        name, sep, number = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in COMPONENTS:
            raise QuantityError(
                f"bytes per parameter {stripped!r}: {item.strip()!r} is not one of "
                + ", ".join(f"{part}=N" for part in COMPONENTS)
            )
        if name in values:
            raise QuantityError(f"bytes per parameter {stripped!r} names {name} twice")
        values[name] = _non_negative(number, what=f"bytes per parameter for {name}")
    return BytesPerParam(**values)


@dataclass(frozen=True, slots=True)
class StrategyNeed:
    """Model-state bytes one GPU holds under one strategy on ``gpus`` GPUs."""

    name: str
    gpus: int
    sharded: tuple[str, ...]
    replicated: tuple[str, ...]
    gather_bytes: int
    bytes_per_gpu: int

    @property
    def title(self) -> str:
        """Human name, e.g. ``ZeRO-3``."""
        return STRATEGY_TITLES[self.name]


def gather_params(params: int, largest_layer_params: int | None) -> int:
    """Parameters of the layer gathered at once: the given figure, or the stated assumption."""
    if largest_layer_params is not None:
        return largest_layer_params
    return min(math.ceil(params * ASSUMED_LARGEST_LAYER_FRACTION), ASSUMED_LARGEST_LAYER_CAP)


def size_strategy(
    name: str, *, params: int, gpus: int, split: BytesPerParam, largest_layer_params: int | None = None
) -> StrategyNeed:
    """Bytes per GPU of ``name`` for a model of ``params`` parameters sharded over ``gpus``."""
    if name not in _SHARDED:
        raise ValueError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGY_ORDER)}")
    if gpus < 1:
        raise ValueError(f"need at least one GPU, got {gpus}")
    sharded = _sharded_parts(name, split)
    replicated = tuple(part for part in COMPONENTS if part not in sharded and not _gathered_only(name, split, part))
    gather = _gather_bytes(name, params=params, split=split, largest_layer_params=largest_layer_params)
    per_param_replicated = sum((split.part(part) for part in replicated), Fraction(0))
    per_param_sharded = sum((split.part(part) for part in sharded), Fraction(0))
    exact = per_param_replicated * params + per_param_sharded * params / gpus + gather
    return StrategyNeed(
        name=name,
        gpus=gpus,
        sharded=sharded,
        replicated=replicated,
        gather_bytes=gather,
        bytes_per_gpu=math.ceil(exact),
    )


def min_gpus(
    name: str, *, params: int, split: BytesPerParam, available_bytes: int, largest_layer_params: int | None = None
) -> int | None:
    """The fewest GPUs with ``available_bytes`` each on which ``name`` fits; None when none do."""
    one = size_strategy(name, params=params, gpus=1, split=split, largest_layer_params=largest_layer_params)
    if one.bytes_per_gpu <= available_bytes:
        return 1
    fixed = Fraction(one.gather_bytes) + sum((split.part(p) for p in one.replicated), Fraction(0)) * params
    shardable = sum((split.part(p) for p in one.sharded), Fraction(0)) * params
    room = available_bytes - fixed
    if shardable == 0 or room <= 0:
        return None
    count = max(1, math.ceil(shardable / room))
    while (
        size_strategy(name, params=params, gpus=count, split=split,
                      largest_layer_params=largest_layer_params).bytes_per_gpu
        > available_bytes
    ):
        count += 1
    return count


def _sharded_parts(name: str, split: BytesPerParam) -> tuple[str, ...]:
    """What ``name`` shards; FSDP without a master copy shards the weights in their own dtype."""
    if name == "fsdp" and split.master == 0:
        return _SHARDED["zero3"]
    return _SHARDED[name]


def _gathered_only(name: str, split: BytesPerParam, part: str) -> bool:
    """FSDP keeps no persistent 16-bit shard when it has fp32 master weights to shard instead."""
    return name == "fsdp" and part == "weights" and split.master > 0


def _gather_bytes(name: str, *, params: int, split: BytesPerParam, largest_layer_params: int | None) -> int:
    """Room to gather one layer (16-bit weights + 16-bit gradients) for the fully sharded strategies."""
    if name not in ("zero3", "fsdp"):
        return 0
    return math.ceil(2 * split.weights * gather_params(params, largest_layer_params))


def _non_negative(text: str, *, what: str) -> Fraction:
    """A finite number >= 0 as an exact fraction (``2``, ``1.5``, ``16/9``)."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise QuantityError(f"{what} {text.strip()!r} is not a number") from None
    if value < 0:
        raise QuantityError(f"{what} {text.strip()!r} must not be negative")
    if value > 1000:
        raise QuantityError(f"{what} {text.strip()!r} is more than 1000 bytes per parameter; check the number")
    return value


def _number(value: Fraction) -> str:
    """``Fraction(18)`` -> ``18``; ``Fraction(16, 9)`` -> ``1.78``."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}"
