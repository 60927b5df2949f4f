import torch
import torch.distributed as dist

loss = torch.tensor([1.0])
dist.all_reduce(loss)
if dist.get_rank() == 0:
    print(loss.item() / dist.get_world_size())
