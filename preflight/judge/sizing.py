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

LoRA and QLoRA (:class:`LoraSplit`): the base model's weights are frozen and stored at 16, 8 or 4
bits (2, 1 or 0.5 bytes per parameter: bf16, bitsandbytes int8, NF4/FP4) with no gradients and no
optimizer state; only the trainable parameters (the adapters) carry the full split (18 bytes).
ZeRO-3 and FSDP shard the frozen weights too and gather one frozen layer at a time (no gradient
for it); DDP and ZeRO-1/2 keep all frozen weights on every GPU. A LoRA adapter on a
``d_out x d_in`` matrix has ``r x (d_in + d_out)`` parameters (its A and B matrices), so ``M``
adapted ``hidden x hidden`` matrices per layer give ``2 x r x hidden x M x layers`` trainable
parameters; ``M = 2`` is PEFT's default for Llama (``q_proj``, ``v_proj``, peft/utils/constants.py).
Quantisation scales (about 0.5 bit per parameter for NF4 with 64-value blocks) are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from preflight.parse.quantity import QuantityError, format_param_count

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


BASE_BITS = (16, 8, 4)
"""Storage of frozen base weights: bf16/fp16, int8 (bitsandbytes LLM.int8), 4-bit (NF4/FP4, QLoRA)."""

DEFAULT_LORA_MATRICES = 2
"""Adapted hidden x hidden matrices per layer when not given: PEFT's default for Llama (q_proj, v_proj)."""


@dataclass(frozen=True, slots=True)
class LoraSplit:
    """LoRA/QLoRA: ``frozen_params`` at ``base_bits`` (no gradients, no optimizer), ``trainable_params`` in full."""

    trainable_params: int
    frozen_params: int
    base_bits: int = 16
    how: str = ""
    """How the trainable count was found, shown with the formula."""

    def __post_init__(self) -> None:
        if self.base_bits not in BASE_BITS:
            raise QuantityError(f"base bits must be one of {', '.join(map(str, BASE_BITS))}, got {self.base_bits}")
        if self.trainable_params < 1:
            raise QuantityError(f"trainable parameters must be at least 1, got {self.trainable_params}")
        if self.frozen_params < 0:
            raise QuantityError(f"frozen parameters must not be negative, got {self.frozen_params}")

    @property
    def frozen_bytes(self) -> Fraction:
        """Bytes per frozen parameter: 2, 1 or 0.5."""
        return Fraction(self.base_bits, 8)

    @property
    def total_params(self) -> int:
        """Frozen plus trainable parameters."""
        return self.frozen_params + self.trainable_params

    def describe(self, split: BytesPerParam) -> str:
        """The formula, e.g. ``6.99B frozen x 0.5 B (4-bit) + 40M trainable x 18 B``."""
        return (
            f"{format_param_count(self.frozen_params)} frozen x {_number(self.frozen_bytes)} bytes "
            f"({self.base_bits}-bit base) + {format_param_count(self.trainable_params)} trainable x "
            f"{split.describe()}"
        )

    def as_dict(self) -> dict[str, object]:
        """JSON form."""
        return {"trainable_params": self.trainable_params, "frozen_params": self.frozen_params,
                "base_bits": self.base_bits, "frozen_bytes_per_param": float(self.frozen_bytes), "how": self.how}


def lora_adapter_params(*, rank: int, hidden_size: int, layers: int, matrices: int = DEFAULT_LORA_MATRICES) -> int:
    """Trainable parameters of LoRA rank ``rank`` on ``matrices`` hidden x hidden matrices per layer."""
    for name, value in (("LoRA rank", rank), ("hidden size", hidden_size), ("layer count", layers),
                        ("adapted matrices per layer", matrices)):
        if value < 1:
            raise QuantityError(f"{name} must be at least 1, got {value}")
    return 2 * rank * hidden_size * matrices * layers


def lora_split(
    model_params: int,
    *,
    trainable_params: int | None = None,
    rank: int | None = None,
    hidden_size: int | None = None,
    layers: int | None = None,
    matrices: int | None = None,
    base_bits: int = 16,
) -> LoraSplit:
    """The LoRA split from ``--trainable-params`` (part of the model) or ``--lora-rank`` (adapters added).

    Raises :class:`QuantityError` for a combination that does not say what is trained.
    """
    if trainable_params is not None and rank is not None:
        raise QuantityError("give either the trainable parameter count or a LoRA rank, not both")
    if trainable_params is not None:
        if matrices is not None or hidden_size is not None or layers is not None:
            raise QuantityError("hidden size, layer count and adapted matrices go with a LoRA rank, not with "
                                "a trainable parameter count")
        if trainable_params > model_params:
            raise QuantityError(f"trainable parameters ({trainable_params:,}) exceed the model ({model_params:,})")
        return LoraSplit(trainable_params, model_params - trainable_params, base_bits,
                         how="trainable count given; the rest of the model is frozen")
    if rank is None:
        raise QuantityError("a LoRA fit needs the trainable parameter count or a LoRA rank")
    if hidden_size is None or layers is None:
        raise QuantityError("a LoRA rank needs the model's hidden size and layer count to count the adapters")
    count = matrices or DEFAULT_LORA_MATRICES
    adapters = lora_adapter_params(rank=rank, hidden_size=hidden_size, layers=layers, matrices=count)
    return LoraSplit(adapters, model_params, base_bits,
                     how=f"adapters = 2 x rank {rank} x hidden {hidden_size} x {count} matrices x {layers} layers "
                     f"= {adapters:,}, added to the frozen model")


@dataclass(frozen=True, slots=True)
class StrategyNeed:
    """Model-state bytes one GPU holds under one strategy on ``gpus`` GPUs."""

    name: str
    gpus: int
    sharded: tuple[str, ...]
    replicated: tuple[str, ...]
    gather_bytes: int
    bytes_per_gpu: int
    frozen_bytes: int = 0
    """Of ``bytes_per_gpu``: the frozen base weights on this GPU (LoRA/QLoRA), gather room excluded."""

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
    name: str,
    *,
    params: int,
    gpus: int,
    split: BytesPerParam,
    largest_layer_params: int | None = None,
    lora: LoraSplit | None = None,
) -> StrategyNeed:
    """Bytes per GPU of ``name`` for a model of ``params`` parameters sharded over ``gpus``.

    With ``lora`` only its trainable parameters carry ``split``; its frozen ones are stored at
    ``lora.frozen_bytes`` (``params`` then only sizes the assumed largest layer).
    """
    if name not in _SHARDED:
        raise ValueError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGY_ORDER)}")
    if gpus < 1:
        raise ValueError(f"need at least one GPU, got {gpus}")
    sharded = _sharded_parts(name, split)
    replicated = tuple(part for part in COMPONENTS if part not in sharded and not _gathered_only(name, split, part))
    parts = _parts(name, params=params, split=split, largest_layer_params=largest_layer_params, lora=lora)
    frozen = parts.frozen_fixed + parts.frozen_shardable / gpus
    return StrategyNeed(
        name=name,
        gpus=gpus,
        sharded=sharded,
        replicated=replicated,
        gather_bytes=parts.gather,
        bytes_per_gpu=math.ceil(parts.fixed + parts.shardable / gpus),
        frozen_bytes=math.ceil(frozen),
    )


def min_gpus(
    name: str,
    *,
    params: int,
    split: BytesPerParam,
    available_bytes: int,
    largest_layer_params: int | None = None,
    lora: LoraSplit | None = None,
) -> int | None:
    """The fewest GPUs with ``available_bytes`` each on which ``name`` fits; None when none do."""
    parts = _parts(name, params=params, split=split, largest_layer_params=largest_layer_params, lora=lora)

    def need(count: int) -> int:
        return size_strategy(name, params=params, gpus=count, split=split, largest_layer_params=largest_layer_params,
                             lora=lora).bytes_per_gpu

    if need(1) <= available_bytes:
        return 1
    room = available_bytes - parts.fixed
    if parts.shardable == 0 or room <= 0:
        return None
    count = max(1, math.ceil(parts.shardable / room))
    while need(count) > available_bytes:
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class _Parts:
    """Bytes on every GPU (``fixed``) and bytes divided among the GPUs (``shardable``)."""

    fixed: Fraction
    shardable: Fraction
    gather: int
    frozen_fixed: Fraction = Fraction(0)
    frozen_shardable: Fraction = Fraction(0)


def _parts(name: str, *, params: int, split: BytesPerParam, largest_layer_params: int | None,
           lora: LoraSplit | None) -> _Parts:
    """One strategy's bytes as a replicated part plus a sharded part (and the gather room)."""
    sharded = _sharded_parts(name, split)
    replicated = tuple(part for part in COMPONENTS if part not in sharded and not _gathered_only(name, split, part))
    trained = params if lora is None else lora.trainable_params
    per_replicated = sum((split.part(part) for part in replicated), Fraction(0))
    per_sharded = sum((split.part(part) for part in sharded), Fraction(0))
    if lora is None:
        gather = _gather_bytes(name, params=params, split=split, largest_layer_params=largest_layer_params)
        return _Parts(per_replicated * trained + gather, per_sharded * trained, gather)
    frozen = lora.frozen_bytes * lora.frozen_params
    gather = 0
    if name in ("zero3", "fsdp"):
        # Only the frozen weights of one layer are gathered; frozen weights have no gradient.
        gather = math.ceil(lora.frozen_bytes * gather_params(lora.total_params, largest_layer_params))
        return _Parts(per_replicated * trained + gather, per_sharded * trained + frozen, gather,
                      frozen_shardable=frozen)
    return _Parts(per_replicated * trained + frozen, per_sharded * trained, gather, frozen_fixed=frozen)


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
