"""Catalogue entries: the CUDA toolkit, compilers and DeepSpeed's op builds."""

from __future__ import annotations

from preflight.codes import Code

AREA = "CUDA toolkit, build tools and DeepSpeed"

_BUILD_WHY = ("DeepSpeed (and any job that JIT-builds CUDA extensions) compiles its ops against CUDA_HOME at the "
              "first step and stops there without it; plain DDP/FSDP need no toolkit (FAIL when DeepSpeed is "
              "installed or announced with --with deepspeed, WARN otherwise).")
_TOOLKIT_FIX = "Install the CUDA toolkit whose major.minor matches torch.version.cuda and point CUDA_HOME at it."

CODES = (
    Code("CUDA_TOOLKIT_MISSING",
         "torch is a CUDA build but no CUDA toolkit is found (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda).",
         _BUILD_WHY, _TOOLKIT_FIX),
    Code("CUDA_HOME_WITHOUT_NVCC",
         "CUDA_HOME points at a directory without bin/nvcc.",
         _BUILD_WHY, _TOOLKIT_FIX + " (a runtime-only image has no nvcc: use a -devel image)."),
    Code("NVCC_UNUSABLE",
         "nvcc at CUDA_HOME runs but does not report a CUDA release.",
         _BUILD_WHY, _TOOLKIT_FIX + " Run `$CUDA_HOME/bin/nvcc --version` to see what it prints."),
    Code("TOOLKIT_MAJOR_MISMATCH",
         "The toolkit at CUDA_HOME and torch's CUDA differ in major version (e.g. 13.0 vs 12.8).",
         "torch.utils.cpp_extension refuses to build CUDA extensions across majors, so DeepSpeed's ops do not "
         "build. " + _BUILD_WHY.split(" compiles", 1)[0] + " stops at the first step.",
         _TOOLKIT_FIX),
    Code("CUDA_HOME_WITHOUT_HEADERS",
         "The toolkit at CUDA_HOME has nvcc but no include/cuda_runtime_api.h.",
         "JIT builds cannot find the CUDA headers. " + _BUILD_WHY,
         _TOOLKIT_FIX + " (install the toolkit's development headers, e.g. the cuda-cudart-dev package)."),
    Code("CUDA_HOME_PATH_DISAGREE",
         "CUDA_HOME (what builds use) and the first nvcc on PATH (what a shell runs) are different toolkits.",
         "A build that works by hand can fail in the job (or the reverse), and error messages name the wrong "
         "toolkit.",
         "Make them agree: `export PATH=$CUDA_HOME/bin:$PATH`, or point CUDA_HOME at the toolkit on PATH."),
    Code("DEEPSPEED_PREBUILT_CUDA_MISMATCH",
         "DeepSpeed's pre-built ops were compiled for another CUDA than the job's torch.",
         "DeepSpeed refuses to load them: the ZeRO job stops at start.",
         "Reinstall DeepSpeed so it rebuilds against torch's CUDA: "
         "`pip install --force-reinstall --no-cache-dir deepspeed==<version>`."),
    Code("DEEPSPEED_CUDA_MISMATCH",
         "DeepSpeed's op builder will refuse the toolkit at CUDA_HOME for torch's CUDA (its version rule).",
         "The first op build, at the job's first step, raises and the job stops.",
         "Install the toolkit matching torch.version.cuda; at your own risk DS_SKIP_CUDA_CHECK=1 skips the rule."),
    Code("DEEPSPEED_CUDA_CHECK_SKIPPED",
         "DeepSpeed would refuse the toolkit, but DS_SKIP_CUDA_CHECK=1 lets builds through unchecked.",
         "Ops built against a mismatched toolkit may fail to compile or misbehave at run time.",
         "Install the toolkit matching torch.version.cuda, then unset DS_SKIP_CUDA_CHECK."),
    Code("BUILD_TOOLS_MISSING",
         "DeepSpeed is expected but ninja or a C++ compiler is missing.",
         "DeepSpeed JIT-builds its ops with ninja and g++ at the first step; without them the job stops there.",
         "`pip install ninja`; install a compiler (`sudo apt-get install -y build-essential`) or set CXX."),
    Code("CXX_COMPILER_MISSING",
         "No C++ compiler, and DeepSpeed is not expected.",
         "torch.compile (inductor) and C++/CUDA extensions need one; plain eager DDP/FSDP do not.",
         "`sudo apt-get install -y build-essential`, or export CXX=<a compiler that exists>."),
    Code("JIT_BUILD_TIMEOUT",
         "The trial JIT build of a DeepSpeed op did not finish within --jit-build-timeout (the check cannot "
         "decide).",
         "The job's own first step would spend at least that long compiling, on every fresh node.",
         "Raise --jit-build-timeout, or install DeepSpeed with its ops pre-built (DS_BUILD_OPS=1 pip install "
         "deepspeed)."),
    Code("DEEPSPEED_JIT_BUILD_FAILED",
         "The trial JIT build of a DeepSpeed op failed; the compiler's first error is quoted.",
         "The job builds the same op at its first step and stops with the same error.",
         "Reproduce it: `TORCH_EXTENSIONS_DIR=$(mktemp -d) python -c 'from deepspeed.ops.op_builder import <Op>; "
         "<Op>().jit_load(verbose=True)'` and fix the first error (toolkit, compiler, headers)."),
)
