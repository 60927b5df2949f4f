import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

train_sampler = DistributedSampler(train_set)
val_sampler = DistributedSampler(val_set)  # shuffles by default: order does not matter for evaluation
train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler)
val_loader = DataLoader(val_set, batch_size=64, sampler=val_sampler)
for epoch in range(10):
    train_sampler.set_epoch(epoch)
    for batch in train_loader:
        model(batch).sum().backward()
    with torch.no_grad():
        for batch in val_loader:
            model(batch)
