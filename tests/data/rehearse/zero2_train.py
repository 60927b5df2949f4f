"""A DeepSpeed ZeRO-2 training script as a DeepSpeed user writes it: ``deepspeed.initialize`` with
a config dict, ``engine.backward`` and ``engine.step``, and two parameter groups (weight decay and
none), so ZeRO's optimizer calls the inner optimizer once per group in every step. The inner
optimizer is torch's AdamW (``zero_allow_untested_optimizer``), so nothing is JIT-built."""

import argparse
import os

import deepspeed
import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=1000)
    args = parser.parse_args()
    deepspeed.init_distributed()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-3)
    config = {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1_000_000,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    generator = torch.Generator().manual_seed(engine.global_rank)
    for _ in range(args.iterations):
        x = torch.randn(args.micro_batch, 32, generator=generator).to(engine.device)
        y = torch.randn(args.micro_batch, 1, generator=generator).to(engine.device)
        loss = F.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    main()
