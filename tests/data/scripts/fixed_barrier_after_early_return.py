import torch.distributed as dist


def evaluate(model, rank):
    score = run_eval(model) if rank == 0 else None
    dist.barrier()
    return score
