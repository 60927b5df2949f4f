import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import fully_shard

for layer in model.layers:
    fully_shard(layer)
fully_shard(model)
train(model)
dcp.save({"model": model.state_dict()}, checkpoint_id="ckpt/step1000")
if dist.get_rank() == 0:
    print("saved")
