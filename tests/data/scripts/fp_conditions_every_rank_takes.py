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
