"""Bit-exact digests of tensors, read from their raw bytes in one C call.

``bytes(tensor.untyped_storage())`` iterates the storage one element at a time in Python (3.9 s for
the DDP model's 1.58 million parameters); ``ctypes.string_at`` over a contiguous CPU copy reads the
same bytes at memory speed and needs neither numpy nor a serialiser.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Iterable
from typing import Any


def tensor_bytes(tensor: Any) -> bytes:
    """The tensor's values as float32 bytes in row-major order."""
    import torch

    data = tensor.detach().to("cpu", torch.float32).contiguous()
    return ctypes.string_at(data.data_ptr(), data.numel() * data.element_size())


def tensor_digest(tensor: Any) -> str:
    """sha256 of the tensor's shape and float32 values."""
    digest = hashlib.sha256(repr(tuple(tensor.shape)).encode())
    digest.update(tensor_bytes(tensor))
    return digest.hexdigest()


def parameters_digest(tensors: Iterable[Any]) -> tuple[str, float]:
    """One sha256 over every tensor's float32 bytes, in order, and the float64 sum of all values."""
    digest = hashlib.sha256()
    total = 0.0
    for tensor in tensors:
        digest.update(tensor_bytes(tensor))
        total += float(tensor.detach().double().sum())
    return digest.hexdigest(), total
