"""pytorch/examples distributed/FSDP/T5_training.py-shaped: the sampler goes to train() in utils/."""
import os

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from utils import setup, train

setup()
rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
sampler = DistributedSampler(train_set, rank=rank, num_replicas=int(os.environ["WORLD_SIZE"]), shuffle=True)
loader = DataLoader(train_set, batch_size=8, sampler=sampler)
for epoch in range(1, 4):
    train(model, loader, optimizer, epoch, sampler=sampler)
