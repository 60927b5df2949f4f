"""Phase names the strategy workers announce with ``ctx.progress``.

Kept apart from the workers (which import torch) so the judges can recognise where a rank hung,
e.g. inside a checkpoint save that not every rank called.
"""

from __future__ import annotations

OP_LOAD = "loading DeepSpeed's ops (a JIT build when they are not built yet)"
BUILD = "building the model and sharding it (collective)"
STEPS = "training steps: forward, backward, optimizer step (collectives every layer)"
AGREEMENT = "comparing losses and gathered parameters across ranks (collective)"
CHECKPOINT_SAVE = "checkpoint save (collective on every rank)"
CHECKPOINT_LOAD = "checkpoint load into a fresh model (collective on every rank)"
CHECKPOINT_VERIFY = "comparing the loaded state with the saved one"
CHECKPOINT_REMOVE = "removing the checkpoint directory (barrier)"

CHECKPOINT_PHASES = (CHECKPOINT_SAVE, CHECKPOINT_LOAD)
