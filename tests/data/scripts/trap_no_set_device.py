import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="nccl")
model = Net().cuda()
model = DDP(model)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
    loss.backward()
