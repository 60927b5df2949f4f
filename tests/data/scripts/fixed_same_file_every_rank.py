import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
for epoch in range(10):
    train(model, epoch)
    if dist.get_rank() == 0:
        torch.save({"epoch": epoch, "model": model.module.state_dict()}, "checkpoint.pt")
    dist.barrier()
