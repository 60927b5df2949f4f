import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_only


@rank_zero_only
def log_metrics(metrics):
    dist.all_reduce(metrics)
    print(metrics)
