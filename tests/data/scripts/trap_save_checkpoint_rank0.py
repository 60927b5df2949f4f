import deepspeed
import torch.distributed as dist

model_engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds.json")
for step, batch in enumerate(loader):
    loss = model_engine(batch)
    model_engine.backward(loss)
    model_engine.step()
    if dist.get_rank() == 0 and step % 100 == 0:
        model_engine.save_checkpoint("checkpoints", tag=f"step{step}")
