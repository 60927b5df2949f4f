"""A stand-in for DeepSpeed in the project's tests (DeepSpeed cannot run on gloo CPU ranks).

It has the surface preflight's ZeRO worker uses: ``initialize`` returning an engine with
``backward``, ``step`` (which steps the optimizer at the accumulation boundary), ``module``,
``save_checkpoint`` and ``load_checkpoint`` (both synchronise every rank, as DeepSpeed's do), and
``zero.GatheredParameters``. Behaviour is chosen with ``PREFLIGHT_FAKE_DEEPSPEED``:
``build-fails`` prints a failed JIT build of fused Adam and raises what torch raises;
``skip-save:RANK`` makes that rank never call the save (it sleeps, as a job whose save sits under
``if rank == 0:`` goes on elsewhere), so the others hang inside it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from deepspeed import zero  # noqa: F401 - deepspeed.zero.GatheredParameters, as in DeepSpeed

__version__ = "0.0.0+preflight.fake"

FAILED_BUILD = """\
[1/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=fused_adam -c multi_tensor_adam.cu -o multi_tensor_adam.cuda.o
FAILED: multi_tensor_adam.cuda.o
/usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=fused_adam -c multi_tensor_adam.cu -o multi_tensor_adam.cuda.o
nvcc fatal   : Unsupported gpu architecture 'compute_90'
ninja: build stopped: subcommand failed.
"""


class Engine:
    """DDP plus AdamW with gradient accumulation: enough of a DeepSpeed engine for the worker."""

    def __init__(self, model: torch.nn.Module, config: dict[str, Any]) -> None:
        self.module = model
        self.ddp = DistributedDataParallel(model)
        params = config["optimizer"]["params"]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=params["lr"], weight_decay=params["weight_decay"])
        self.accumulation = int(config["gradient_accumulation_steps"])
        self.micro_steps = 0

    def __call__(self, *args: Any) -> Any:
        return self.ddp(*args)

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.accumulation).backward()

    def step(self) -> None:
        self.micro_steps += 1
        if self.micro_steps % self.accumulation == 0:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        if os.environ.get("PREFLIGHT_FAKE_DEEPSPEED") == f"skip-save:{dist.get_rank()}":
            time.sleep(3600)
        folder = Path(save_dir) / tag
        folder.mkdir(parents=True, exist_ok=True)
        state = {"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}
        torch.save(state, folder / f"rank{dist.get_rank()}_states.pt")
        dist.barrier()  # DeepSpeed synchronises inside save_checkpoint: every rank must call it

    def load_checkpoint(self, load_dir: str, tag: str) -> tuple[str | None, dict[str, Any]]:
        dist.barrier()
        path = Path(load_dir) / tag / f"rank{dist.get_rank()}_states.pt"
        if not path.exists():
            return None, {}
        state = torch.load(path, weights_only=True)
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        return str(path), {}


def initialize(*, model: torch.nn.Module, model_parameters: Any, config: dict[str, Any]) -> tuple[Any, ...]:
    """``deepspeed.initialize``: (engine, optimizer, dataloader, lr scheduler)."""
    if os.environ.get("PREFLIGHT_FAKE_DEEPSPEED") == "build-fails":
        print(FAILED_BUILD, flush=True)
        raise RuntimeError("Error building extension 'fused_adam'")
    engine = Engine(model, config)
    return engine, engine.optimizer, None, None
