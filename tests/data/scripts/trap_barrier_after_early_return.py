import torch.distributed as dist


def evaluate(model, rank):
    if rank != 0:
        return None
    score = run_eval(model)
    dist.barrier()
    return score
