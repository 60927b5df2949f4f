"""A training loop with a hand-written SGD update and no torch.optim optimizer (as in tutorials that
teach autograd): a rehearsal has no optimizer step to count unless the steps are marked.
``--mark`` calls ``preflight_rehearsal.step()`` (present only under ``preflight rehearse``) once per
iteration; ``--steps N`` stops after N iterations (0: until stopped)."""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    from preflight_rehearsal import step as mark_step
except ImportError:
    def mark_step():
        pass


def train_step(net, x, y, lr):
    loss = F.mse_loss(net(x), y)
    net.zero_grad()
    loss.backward()
    with torch.no_grad():
        for param in net.parameters():
            param -= lr * param.grad
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--mark", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    net = DDP(torch.nn.Linear(16, 1))
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    done = 0
    while not args.steps or done < args.steps:
        train_step(net, x, y, 0.01)
        if args.mark:
            mark_step()
        done += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
