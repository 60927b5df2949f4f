import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

for layer in model.layers:
    fully_shard(layer)
fully_shard(model)
train(model)
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
