import torch
import torch.distributed as dist

if dist.is_initialized() and dist.get_world_size() > 1:
    dist.barrier()
if args.local_rank != -1:
    dist.all_reduce(torch.ones(1))
if args.lora_rank > 0:
    dist.barrier()
if dist.get_rank() == 0:
    picked = torch.gather(logits, 1, index)
    total = functools.reduce(lambda a, b: a + b, values)
    print(picked, total)


def reduce_to(tensor, rank=None):
    if rank is None:
        dist.all_reduce(tensor)
    else:
        dist.reduce(tensor, rank)


def share_states(states, world_size, keep_rank):
    for rank in range(world_size):  # every process runs every iteration: the test is the same everywhere
        if rank == keep_rank:
            continue
        dist.broadcast_object_list([states[rank]], src=rank)
