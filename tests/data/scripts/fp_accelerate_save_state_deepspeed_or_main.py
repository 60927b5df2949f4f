from accelerate import Accelerator
from accelerate.utils import DistributedType

accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, batch in enumerate(loader):
    accelerator.backward(model(batch))
    optimizer.step()
    # DeepSpeed saves on every process; plain DDP on the main one (diffusers' fix for issue #2606)
    if accelerator.distributed_type == DistributedType.DEEPSPEED or accelerator.is_main_process:
        if step % 500 == 0:
            accelerator.save_state(f"ckpt/step{step}")
