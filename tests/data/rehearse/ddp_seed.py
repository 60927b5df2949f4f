"""A training script in the seed's style: DDP with a CPU/gloo fallback, a DistributedSampler whose
epoch is set, and a checkpoint written by rank 0 at the end of every epoch.

The fault options put a real failure in the user's own loop, as a buggy script would have it:
``--crash-at-step N`` raises on ``--fault-rank``, ``--hang-at-step N`` sleeps there for good,
``--oom-at-step N`` asks the allocator for 256 TiB, ``--no-step`` never calls ``optimizer.step()``
(it keeps computing until stopped; ``--batch-sleep S`` rests S seconds after each batch, so a test
that waits out a deadline does not spend a core on it), ``--max-steps N`` ends training early.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--checkpoint", default="checkpoint.pt")
    parser.add_argument("--fault-rank", type=int, default=0)
    parser.add_argument("--crash-at-step", type=int, default=0)
    parser.add_argument("--hang-at-step", type=int, default=0)
    parser.add_argument("--oom-at-step", type=int, default=0)
    parser.add_argument("--no-step", action="store_true")
    parser.add_argument("--batch-sleep", type=float, default=0.0)
    parser.add_argument("--max-steps", type=int, default=0)
    return parser.parse_args()


def main():
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1))
    model = model.to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    data = TensorDataset(torch.randn(args.samples, 32), torch.randn(args.samples, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            if args.batch_sleep:
                time.sleep(args.batch_sleep)
            if args.no_step:
                continue
            optimizer.step()
            step += 1
            if rank == args.fault_rank and step == args.crash_at_step:
                raise RuntimeError(f"injected failure in the training loop at step {step}")
            if rank == args.fault_rank and step == args.oom_at_step:
                torch.empty(1 << 48, dtype=torch.uint8, device=device)
            if rank == args.fault_rank and step == args.hang_at_step:
                time.sleep(3600)
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
        if rank == 0:
            torch.save(model.state_dict(), args.checkpoint)
        dist.barrier()
    if rank == 0:
        print(f"trained {step} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
