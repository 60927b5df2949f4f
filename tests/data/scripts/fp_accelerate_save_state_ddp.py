from accelerate import Accelerator

accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(3):
    for batch in loader:
        accelerator.backward(model(batch))
        optimizer.step()
    if accelerator.is_main_process:
        accelerator.save_state(f"ckpt/epoch{epoch}")
