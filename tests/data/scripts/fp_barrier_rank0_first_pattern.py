import torch.distributed as dist


def load(args):
    if args.local_rank not in [-1, 0]:
        dist.barrier()  # the other ranks wait while rank 0 downloads
    model = download(args.model_name)
    if args.local_rank == 0:
        dist.barrier()  # rank 0 releases them
    return model
