"""litgpt finetune/lora.py-shaped (after PR #2213): generation on rank 0 of an FSDP2 model."""
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


@torch.no_grad()
def generate_example(model, prompt):
    model.eval()
    output = model.generate(prompt, max_new_tokens=50)
    model.train()
    return output


def fit(model, optimizer, loader, prompt):
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        optimizer.step()
        if step % 100 == 0 and dist.get_rank() == 0:
            print(generate_example(model, prompt))
        dist.barrier()


dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
fit(model, optimizer, loader, "Tell me a story")
