import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
rank = int(os.environ["RANK"])
torch.manual_seed(1337 + rank)  # each rank its own order, as nanoGPT does
model = DDP(net.cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
for batch in DataLoader(dataset, batch_size=8, shuffle=True):
    model(batch).sum().backward()
