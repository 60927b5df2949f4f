"""A map-style dataset that keeps only this rank's part: a shuffling DataLoader over it is fine."""
import os

import deepspeed
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class ShardedLines(Dataset):
    def __init__(self, path):
        lines = open(path).read().splitlines()
        self.lines = lines[dist.get_rank()::dist.get_world_size()]

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, index):
        return self.lines[index]


torch.manual_seed(0)
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config="ds.json")
for batch in DataLoader(ShardedLines(os.environ["DATA"]), batch_size=8, shuffle=True):
    engine.backward(engine(batch))
    engine.step()
