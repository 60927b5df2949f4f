import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group(backend="nccl")
model = Net().cuda()
model = DDP(model, device_ids=[local_rank])
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
    loss.backward()
