"""``deepspeed.zero.GatheredParameters`` of the test stand-in: parameters are never partitioned."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def GatheredParameters(params: Any, modifier_rank: int | None = None) -> Iterator[None]:  # noqa: N802
    """DeepSpeed's name and signature; nothing to gather here."""
    yield
