import os
import io

import torch
import torch.distributed as dist

dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
rank = dist.get_rank()
for epoch in range(10):
    train(model, epoch)
    torch.save(optimizer.state_dict(), f"optim_rank{rank}.pt")  # one file per rank
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)  # in memory, not a file
