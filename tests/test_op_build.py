"""Finding a JIT op build failure and the compiler's message in a rank's error and log."""

from __future__ import annotations

import pytest

from preflight.parse.op_build import OpBuildFailure, find_op_build_failure

NVCC_ARCH = """\
Using /root/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...
Emitting ninja build file /root/.cache/torch_extensions/py311_cu124/fused_adam/build.ninja...
[1/3] /usr/local/cuda/bin/nvcc -ccbin g++ -c multi_tensor_adam.cu -o multi_tensor_adam.cuda.o
FAILED: multi_tensor_adam.cuda.o
nvcc fatal   : Unsupported gpu architecture 'compute_90'
ninja: build stopped: subcommand failed.
Traceback (most recent call last):
RuntimeError: Error building extension 'fused_adam'
"""

MISSING_HEADER = """\
FAILED: cpu_adam.o
csrc/includes/simd.h:12:10: fatal error: immintrin.h: No such file or directory
compilation terminated.
ninja: build stopped: subcommand failed.
RuntimeError: Error building extension 'cpu_adam'
"""

MISMATCH = """\
deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA version 12.1 does \
not match the version torch was compiled with 12.4, unable to compile cuda/cpp extensions without a matching cuda \
version.
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NVCC_ARCH, OpBuildFailure("fused_adam", "nvcc fatal   : Unsupported gpu architecture 'compute_90'")),
        (MISSING_HEADER, OpBuildFailure("cpu_adam", "csrc/includes/simd.h:12:10: fatal error: immintrin.h: No such "
                                                    "file or directory")),
        (MISMATCH, OpBuildFailure(None, "Installed CUDA version 12.1 does not match the version torch was compiled "
                                        "with 12.4, unable to compile cuda/cpp extensions without a matching cuda "
                                        "version.")),
        ("deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA "
         "op(s)", OpBuildFailure(None, "CUDA_HOME does not exist, unable to compile CUDA op(s)")),
        ("RuntimeError: Ninja is required to load C++ extensions", OpBuildFailure(None, "Ninja is required to load "
                                                                                        "C++ extensions")),
        ("RuntimeError: Error building extension 'fused_adam'",
         OpBuildFailure("fused_adam", "the build failed without a compiler message in the captured output")),
    ],
)
def test_the_compilers_message_is_found(text: str, expected: OpBuildFailure | None) -> None:
    assert find_op_build_failure(text) == expected


def test_an_ordinary_error_is_not_a_build_failure() -> None:
    assert find_op_build_failure("Traceback ...\nValueError: error: shapes do not match") is None
    assert find_op_build_failure("") is None


def test_a_failure_already_described_by_the_worker_reads_back_the_same() -> None:
    failure = OpBuildFailure("fused_adam", "nvcc fatal   : Unsupported gpu architecture 'compute_90'")
    assert find_op_build_failure(f"OpBuildError: {failure.describe()}\nmore log") == failure
