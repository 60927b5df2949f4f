"""A seed-style DDP script: CPU/gloo fallback, DistributedSampler, checkpoint on rank 0."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main():
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    model = DDP(Net().to(device), device_ids=[local_rank] if use_cuda else None)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    if os.path.exists("checkpoint.pt"):
        model.module.load_state_dict(torch.load("checkpoint.pt", map_location=device))
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
        if rank == 0:
            torch.save(model.module.state_dict(), "checkpoint.pt")
            print(f"epoch {epoch} loss {loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
