import torch.distributed as dist


def setup():
    dist.init_process_group("nccl")


def train(model, loader, optimizer, epoch, sampler=None):
    if sampler:
        sampler.set_epoch(epoch)
    for batch in loader:
        model(batch).sum().backward()
        optimizer.step()
