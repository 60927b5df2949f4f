"""The smallest DDP training loop: a step costs almost nothing, so what a rehearsal adds shows.
``--steps N`` stops after N steps (0: train until stopped), as a bare torchrun run would."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.ones(4, 8)
    step = 0
    while not args.steps or step < args.steps:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
