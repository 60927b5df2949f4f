#!/usr/bin/env bash
# The first-real-GPU check: install preflight from this checkout on a fresh GPU machine, run it, run the
# GPU test suite (tests/gpu) and the time-to-verdict benchmark, and leave every report under one folder.
#
#   bash benchmarks/gpu_check.sh [OUTPUT_DIR]        (default: /tmp/gpu-check)
#
# With $OUT set (the device tool's folder that comes back), OUTPUT_DIR is packed into
# $OUT/gpu-check.tgz and the log is copied beside it (the tool returns few files).
#
# Uses the machine's own python3 and torch (a GPU image has both; nothing is downloaded): a virtual
# environment with --system-site-packages keeps the image's CUDA torch, nvidia-ml-py, psutil, jinja2.
# Meant to finish in under 8 minutes on an 8-GPU node; every step has its own deadline.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-/tmp/gpu-check}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
step() { echo; echo "== $(date +%T) $*"; }

step "machine"
nvidia-smi -L || echo "nvidia-smi -L failed"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max --format=csv || true
nvidia-smi topo -m > "$out/topo.txt" 2>&1 || true
nvidia-smi -q > "$out/smi-q.txt" 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
command -v nvcc && nvcc --version | tail -2

step "install (no network: the image's packages, the checkout without build isolation)"
python3 -m venv --system-site-packages /tmp/preflight-venv
. /tmp/preflight-venv/bin/activate
timeout 300 pip install -q --no-deps --no-build-isolation -e . || { echo "install failed"; exit 1; }
python -c 'import preflight; print("preflight", preflight.__version__)'

step "preflight --profile quick"
timeout 180 preflight --report-dir "$out/quick" --profile quick --oneline; echo "exit $?"
step "preflight (full, every strategy)"
timeout 300 preflight --report-dir "$out/full" --strategy all --oneline; echo "exit $?"
step "preflight with NCCL_P2P_DISABLE=1 inherited (the comparison flips)"
NCCL_P2P_DISABLE=1 timeout 240 preflight --report-dir "$out/p2p-off" -k "nccl or allreduce" --oneline; echo "exit $?"

step "GPU test suite (tests/gpu: every GPU path against the node itself)"
timeout 420 python -m pytest -q -p no:cacheprovider tests/gpu --junitxml="$out/gpu-tests.xml" \
    -o addopts="" 2>&1 | tail -40

step "time to a verdict: bare launch vs quick vs full"
timeout 420 python benchmarks/launch_ratio.py --runs 2 | tee "$out/launch_ratio.txt"

step "done: reports under $out"
ls -R "$out" | head -50
if [ -n "${OUT:-}" ] && [ "$out" != "$OUT" ]; then
    tar czf "$OUT/gpu-check.tgz" -C "$out" . && cp "$out/gpu_check.log" "$OUT/"
fi
