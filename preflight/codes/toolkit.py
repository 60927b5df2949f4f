"""Catalogue entries: the CUDA toolkit, compilers and DeepSpeed's op builds."""

from __future__ import annotations

from preflight.codes.entry import Code, Kind

AREA = "CUDA toolkit, build tools and DeepSpeed"

_BUILD_WHY = ("DeepSpeed (and any job that JIT-builds CUDA extensions) compiles its ops against CUDA_HOME at the "
              "first step and stops there without it; plain DDP/FSDP need no toolkit (FAIL when DeepSpeed is "
              "installed or announced with --with deepspeed, WARN otherwise).")
_TOOLKIT_FIX = "Install the CUDA toolkit whose major.minor matches torch.version.cuda and point CUDA_HOME at it."

CODES = (
    Code("CUDA_TOOLKIT_MISSING",
         "torch is a CUDA build but no CUDA toolkit is found (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda).",
         _BUILD_WHY, _TOOLKIT_FIX, kind=Kind.BLOCKER),
    Code("CUDA_HOME_WITHOUT_NVCC",
         "CUDA_HOME points at a directory without bin/nvcc.",
         _BUILD_WHY, _TOOLKIT_FIX + " (a runtime-only image has no nvcc: use a -devel image).", kind=Kind.BLOCKER),
    Code("NVCC_UNUSABLE",
         "nvcc at CUDA_HOME runs but does not report a CUDA release.",
         _BUILD_WHY, _TOOLKIT_FIX + " Run `$CUDA_HOME/bin/nvcc --version` to see what it prints.", kind=Kind.BLOCKER),
    Code("TOOLKIT_MAJOR_MISMATCH",
         "The toolkit at CUDA_HOME and torch's CUDA differ in major version (e.g. 13.0 vs 12.8).",
         "torch.utils.cpp_extension refuses to build CUDA extensions across majors, so DeepSpeed's ops do not "
         "build. " + _BUILD_WHY.split(" compiles", 1)[0] + " stops at the first step.",
         _TOOLKIT_FIX, kind=Kind.BLOCKER),
    Code("CUDA_HOME_WITHOUT_HEADERS",
         "The toolkit at CUDA_HOME has nvcc but no include/cuda_runtime_api.h.",
         "JIT builds cannot find the CUDA headers. " + _BUILD_WHY,
         _TOOLKIT_FIX + " (install the toolkit's development headers, e.g. the cuda-cudart-dev package).",
         kind=Kind.BLOCKER),
    Code("CUDA_HOME_PATH_DISAGREE",
         "CUDA_HOME (what builds use) and the first nvcc on PATH (what a shell runs) are different toolkits.",
         "A build that works by hand can fail in the job (or the reverse), and error messages name the wrong "
         "toolkit.",
         "Make them agree: `export PATH=$CUDA_HOME/bin:$PATH`, or point CUDA_HOME at the toolkit on PATH.",
         kind=Kind.BLOCKER),
    Code("DEEPSPEED_PREBUILT_CUDA_MISMATCH",
         "DeepSpeed's pre-built ops were compiled for another CUDA than the job's torch.",
         "DeepSpeed refuses to load them: the ZeRO job stops at start.",
         "Reinstall DeepSpeed so it rebuilds against torch's CUDA: "
         "`pip install --force-reinstall --no-cache-dir deepspeed==<version>`.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_PREBUILT_TORCH_MISMATCH",
         "DeepSpeed's pre-built ops were compiled against another torch version than the job's.",
         "Loading them raises 'PyTorch version mismatch' at the job's first step.",
         "Reinstall DeepSpeed against this torch (`pip install --force-reinstall --no-cache-dir deepspeed==<version>`, "
         "with DS_BUILD_OPS=1 for pre-built ops).", kind=Kind.BLOCKER),
    Code("DEEPSPEED_CUDA_MAJOR_MISMATCH",
         "DeepSpeed would compile its ops with a toolkit whose CUDA major differs from torch's.",
         "The JIT build links a second CUDA runtime into the job's process (undefined behaviour, crashes at the "
         "first kernel), and an ahead-of-time build is refused outright (CUDAMismatchException).",
         "Install the toolkit whose major.minor matches torch.version.cuda and point CUDA_HOME at it.",
         kind=Kind.BLOCKER),
    Code("DEEPSPEED_CUDA_MINOR_MISMATCH",
         "The toolkit and torch's CUDA differ in minor version only.",
         "JIT builds (the default) accept it; an ahead-of-time build (DS_BUILD_OPS=1 pip install deepspeed) "
         "raises CUDAMismatchException.",
         "Nothing for JIT builds; for an ahead-of-time build use the matching toolkit, or build once with "
         "DS_SKIP_CUDA_CHECK=1.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_ACCELERATOR_UNKNOWN",
         "DS_ACCELERATOR names an accelerator DeepSpeed does not know.",
         "get_accelerator() raises ValueError when the job starts.",
         "Unset DS_ACCELERATOR (DeepSpeed detects CUDA by itself) or set a supported value.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_ACCELERATOR_CPU",
         "DS_ACCELERATOR=cpu on a node with GPUs.",
         "DeepSpeed trains on the CPU (CPU tensors, gloo or oneCCL) and leaves the GPUs idle.",
         "Unset DS_ACCELERATOR.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_ACCELERATOR_CUDA_WITHOUT_GPU",
         "DS_ACCELERATOR=cuda but no GPU is visible (or torch is a CPU build).",
         "DeepSpeed's CUDA accelerator fails at its first device call.",
         "Unset DS_ACCELERATOR (DeepSpeed then picks its CPU accelerator) or fix GPU visibility.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_ACCELERATOR_OVERRIDDEN",
         "DS_ACCELERATOR overrides what DeepSpeed would detect here.",
         "DeepSpeed uses another device backend than this node offers.",
         "Unset DS_ACCELERATOR unless the override is intended.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_CUDA_MISMATCH",
         "DeepSpeed's op builder will refuse the toolkit at CUDA_HOME for torch's CUDA (its version rule).",
         "The first op build, at the job's first step, raises and the job stops.",
         "Install the toolkit matching torch.version.cuda; at your own risk DS_SKIP_CUDA_CHECK=1 skips the rule.",
         kind=Kind.BLOCKER),
    Code("DEEPSPEED_CUDA_CHECK_SKIPPED",
         "DeepSpeed would refuse the toolkit, but DS_SKIP_CUDA_CHECK=1 lets builds through unchecked.",
         "Ops built against a mismatched toolkit may fail to compile or misbehave at run time.",
         "Install the toolkit matching torch.version.cuda, then unset DS_SKIP_CUDA_CHECK.", kind=Kind.BLOCKER),
    Code("BUILD_TOOLS_MISSING",
         "DeepSpeed is expected but ninja or a C++ compiler is missing.",
         "DeepSpeed JIT-builds its ops with ninja and g++ at the first step; without them the job stops there.",
         "`pip install ninja`; install a compiler (`sudo apt-get install -y build-essential`) or set CXX.",
         kind=Kind.BLOCKER),
    Code("CXX_COMPILER_MISSING",
         "No C++ compiler, and DeepSpeed is not expected.",
         "torch.compile (inductor) and C++/CUDA extensions need one; plain eager DDP/FSDP do not.",
         "`sudo apt-get install -y build-essential`, or export CXX=<a compiler that exists>.", kind=Kind.COST),
    Code("DEEPSPEED_OP_BUILD_SLOW",
         "The first build of DeepSpeed's ops did not finish within its budget (the compiled objects are kept, so "
         "the next run resumes).",
         "The ZeRO rehearsals are not run, and a job JIT-building these ops waits as long at its first step.",
         "Run preflight again to let the build finish, raise its budget, or install DeepSpeed with its ops "
         "pre-built (DS_BUILD_OPS=1 pip install deepspeed).", kind=Kind.COST),
    Code("DEEPSPEED_OP_BUILD_FAILED",
         "DeepSpeed could not build (or load) one of its ops; the compiler's message is quoted.",
         "The job builds the same op at its first step and stops there.",
         "Install the toolkit matching torch.version.cuda, ninja and g++ (see the toolkit checks), or install "
         "DeepSpeed with its ops pre-built.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_PREBUILT_OPS_REFUSED",
         "DeepSpeed refuses to load its pre-built ops ('PyTorch version mismatch' or 'CUDA version mismatch').",
         "The job stops at its first step the same way.",
         "Reinstall DeepSpeed against the job's torch and CUDA.", kind=Kind.BLOCKER),
    Code("DEEPSPEED_IMPORT_FAILED",
         "`import deepspeed` fails in the job's interpreter.",
         "A job importing DeepSpeed crashes the same way at start.",
         "Read the traceback in the evidence (a missing dependency, a broken install) and fix the install.",
         kind=Kind.BLOCKER),
    Code("OP_BUILD_BUSY",
         "Another preflight process held the extensions directory for the whole build budget (the check cannot "
         "decide).",
         "The ops were not built or checked in this run.",
         "Let the other run finish, then run again.", kind=Kind.BLOCKER),
    Code("OP_CACHE_UNUSABLE",
         "preflight's op cache folder cannot be created (a regular file on its path, a read-only disk; the check "
         "cannot decide).",
         "DeepSpeed's ops were not built or checked in this run, and the ZeRO rehearsals did not run.",
         "Point PREFLIGHT_TORCH_EXTENSIONS_DIR at a folder this user can write, or unset it.", kind=Kind.BLOCKER),
    Code("OP_BUILD_CRASHED",
         "The op build child process ended without reporting every op (the check cannot decide).",
         "Whether DeepSpeed's ops build here is unknown.",
         "Read the build log tail in the evidence and run again.", kind=Kind.BLOCKER),
    Code("JIT_BUILD_TIMEOUT",
         "The trial JIT build of a DeepSpeed op did not finish within --jit-build-timeout (the check cannot "
         "decide).",
         "The job's own first step would spend at least that long compiling, on every fresh node.",
         "Raise --jit-build-timeout, or install DeepSpeed with its ops pre-built (DS_BUILD_OPS=1 pip install "
         "deepspeed).", kind=Kind.BLOCKER),
    Code("DEEPSPEED_JIT_BUILD_FAILED",
         "The trial JIT build of a DeepSpeed op failed; the compiler's first error is quoted.",
         "The job builds the same op at its first step and stops with the same error.",
         "Reproduce it: `TORCH_EXTENSIONS_DIR=$(mktemp -d) python -c 'from deepspeed.ops.op_builder import <Op>; "
         "<Op>().jit_load(verbose=True)'` and fix the first error (toolkit, compiler, headers).", kind=Kind.BLOCKER),
)
