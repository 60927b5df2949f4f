import os

import deepspeed

ddp_rank = int(os.environ["RANK"])
master_process = ddp_rank == 0


def save(engine, step):
    engine.save_checkpoint("out", tag=str(step))


engine, _, _, _ = deepspeed.initialize(model=model, config="ds.json")
for step in range(1000):
    engine.step()
    if master_process:
        save(engine, step)
