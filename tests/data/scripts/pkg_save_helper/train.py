import os

import deepspeed
from checkpointing import save_every_n

engine, _, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
rank = int(os.environ["RANK"])
for step in range(1000):
    engine.step()
    if rank == 0:
        save_every_n(engine, step)
