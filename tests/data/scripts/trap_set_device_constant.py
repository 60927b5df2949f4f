import torch
import torch.distributed as dist

torch.cuda.set_device(0)
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(Net().cuda(), device_ids=[0])
