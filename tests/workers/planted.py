"""Test-only phase that leaks planted secrets the way a failing job does: in its output and its exception.

Every rank prints a URL with a password, a ``ghp_`` token and the ``HF_TOKEN`` value from its environment
(the run plants them, ``tests/fakes/planted.py``) to stdout and stderr, which land in ``rank<N>.log``, and
raises with the same text, which lands in the phase's error file (``rank<N>.fsdp.error.json``:
``tests/fakes/planted_phase.py`` runs it as the FSDP phase) and the log's traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch.distributed

from preflight.workers.common import WorkerContext
from tests.fakes import planted


def leak(ctx: WorkerContext) -> dict[str, Any]:
    # Both ranks are past the process group's set-up before either raises: a rank that exits while its peer
    # is still connecting would end that peer in gloo's connectFull, before it could leak anything.
    torch.distributed.barrier()
    hf_token = os.environ.get("HF_TOKEN", planted.HF_TOKEN)
    print(f"fetching {planted.URL_WITH_PASSWORD} as HF_TOKEN={hf_token}", flush=True)
    print(f"git remote: https://x-access-token:{planted.GITHUB_TOKEN}@github.com/o/r.git", file=sys.stderr,
          flush=True)
    print(f"MASTER_ADDR was {planted.MASTER_ADDR}", flush=True)
    raise RuntimeError(f"rank {ctx.rank} could not download {planted.URL_WITH_PASSWORD} with token "
                       f"{planted.GITHUB_TOKEN} ({hf_token})")
