"""build-nanogpt-shaped: `ddp` is "is this a distributed run?", the same on every rank."""
import os

import torch
import torch.distributed as dist

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
else:
    ddp_rank = 0
master_process = ddp_rank == 0
for step in range(100):
    loss_accum = torch.zeros(1)
    if ddp:
        dist.all_reduce(loss_accum, op=dist.ReduceOp.AVG)
    if master_process:
        print(f"step {step} loss {loss_accum.item():.4f}")
