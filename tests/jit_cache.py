"""The tests' own build of the DeepSpeed op a script's ranks JIT-build on CPU, once per virtual environment.

On the CPU accelerator ``deepspeed.init_distributed`` builds its shared-memory comm op (``deepspeed_shm_comm``,
``deepspeed/comm/torch.py: build_shm_op``) through torch's ``cpp_extension.load``, that is ninja. Ninja compiles
both sources again (about 80 CPU-s on this machine) whenever its command names other paths or the torch headers
are newer than its objects: in every new virtual environment, since pip writes the headers afresh. CI makes a new
one each run, so each test that needs a build made by this environment's torch shares this one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from pathlib import Path

SHM_COMM = "deepspeed_shm_comm"
BUILD_TIMEOUT_S = 1500.0  # a cold compile on a loaded 2-core machine; a warm one is a second of ninja
_BUILD = ("from deepspeed.accelerator import get_accelerator; "
          "get_accelerator().create_op_builder('ShareMemCommBuilder').jit_load(verbose=False)")


def extensions_cache() -> Path:
    """Where the ranks' DeepSpeed JIT-builds its CPU comm op: ``$TORCH_EXTENSIONS_DIR``, else a cache of the
    tests' own per environment (a build made by another virtual environment's torch is compiled again)."""
    prefix = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    default = Path.home() / ".cache" / "preflight-tests" / "torch_extensions" / prefix
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or default)


@functools.cache
def shm_comm_build() -> Path:
    """The build folder of ``deepspeed_shm_comm`` as this environment's torch leaves it (objects, ninja files,
    library), built first when it is missing or stale. Torch's lock in that folder makes a rank building the
    same op at the same time wait for this build, or this one for the rank's."""
    root = extensions_cache()
    subprocess.run([sys.executable, "-c", _BUILD], env={**os.environ, "TORCH_EXTENSIONS_DIR": str(root)},
                   check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)
    return root / SHM_COMM
