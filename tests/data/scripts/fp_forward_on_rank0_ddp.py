"""nanoGPT-shaped: evaluation on the master process only, of a DDP (not sharded) model."""
import os

import torch
from torch.distributed import init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
init_process_group(backend="nccl")
ddp_rank = int(os.environ["RANK"])
master_process = ddp_rank == 0
model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])])


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = [model(x, y)[1] for x, y in batches]
    model.train()
    return sum(losses) / len(losses)


for iter_num in range(5000):
    if iter_num % 250 == 0 and master_process:
        print(estimate_loss())
