"""What a bare launch does, for the ratio benchmark: join the process group, one all-reduce, leave.

``torchrun --standalone --nproc-per-node=N benchmarks/bare_launch.py``: NCCL on GPUs (after
``set_device(LOCAL_RANK)``), gloo on CPU, as a job's first step would.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def main() -> None:
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        value = torch.ones(1, device="cuda")
    else:
        dist.init_process_group("gloo")
        value = torch.ones(1)
    dist.all_reduce(value)
    assert value.item() == dist.get_world_size()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
