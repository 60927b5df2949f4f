def save_every_n(engine, step, every=100):
    if step % every == 0:
        engine.save_checkpoint("checkpoints", tag=f"step{step}")
