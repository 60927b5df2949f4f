import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

fully_shard(model)
train(model)
torch.save(model.state_dict(), f"shard-{dist.get_rank()}.pt")
