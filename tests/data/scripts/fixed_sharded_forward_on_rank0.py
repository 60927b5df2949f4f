import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


@torch.no_grad()
def generate_example(model, prompt):
    return model.generate(prompt, max_new_tokens=50)


dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
fully_shard(model)
for step, batch in enumerate(loader):
    model(batch).sum().backward()
    optimizer.step()
    if step % 100 == 0:
        text = generate_example(model, "Tell me a story")  # every rank joins the gathers
        if dist.get_rank() == 0:
            print(text)
