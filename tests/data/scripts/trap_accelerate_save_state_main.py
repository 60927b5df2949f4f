from accelerate import Accelerator, DeepSpeedPlugin

accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(3):
    for batch in loader:
        accelerator.backward(model(batch))
        optimizer.step()
    if accelerator.is_main_process:
        accelerator.save_state(f"ckpt/epoch{epoch}")
