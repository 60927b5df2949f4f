import torch.distributed as dist

if dist.get_rank() == 0:
    download_dataset()
    dist.barrier()
else:
    dist.barrier()
