from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

eval_sampler = DistributedSampler(eval_set, shuffle=False)
eval_loader = DataLoader(eval_set, batch_size=64, sampler=eval_sampler)
for batch in eval_loader:
    evaluate(batch)
