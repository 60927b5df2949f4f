"""What a bare launch does, for the ratio benchmark: join the process group, one all-reduce, leave.

``torchrun --standalone --nproc-per-node=N benchmarks/bare_launch.py [--ddp]``: NCCL on GPUs (after
``set_device(LOCAL_RANK)``), gloo on CPU, as a job's first step would. ``--ddp`` also wraps a one-layer
model in ``DistributedDataParallel`` and takes one step: what every DDP job pays before its first step
(in torch 2.x DDP's constructor imports ``torch._dynamo`` and ``torch._inductor``), so the quick profile,
whose ranks take a DDP step, can be compared with the launch of a job that does no more.
"""

from __future__ import annotations

import os
import sys

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
    if "--ddp" in sys.argv[1:]:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).to(value.device))
        model(torch.ones(4, 8, device=value.device)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
