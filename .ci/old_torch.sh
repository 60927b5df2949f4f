#!/usr/bin/env bash
# The oldest torch the package declares (torch>=2.4): run preflight's CPU checks under torch 2.4.1.
#
# A virtual environment with torch 2.4.1 from the package registry (the CUDA 12.1 wheel and its
# nvidia-* libraries, about 2.5 GB: 3.5 min on a quiet machine, 10 min on a loaded one) is built once
# in a persistent cache and kept; this checkout and DeepSpeed 0.19.8 are installed into it, then
# `preflight --cpu --strategy all` runs on the CPU and its report is checked: no check ERRORs, DDP and
# ZeRO-1/2/3 PASS (DeepSpeed's CPU accelerator, its ops built once into preflight's own cache, kept
# with the venv), FSDP2 SKIPs with the reason (it needs torch 2.7 on CPU ranks), exit code 0.
#
# .ci/run calls it; it does nothing when this commit (with a clean tree) already passed it, unless
# --force. PREFLIGHT_CI_CACHE moves the cache (default ~/.cache/preflight-ci).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${PREFLIGHT_CI_CACHE:-$HOME/.cache/preflight-ci}"
venv="$cache/venv-torch-2.4.1"
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
clean=$([ -z "$(git status --porcelain 2>/dev/null)" ] && echo yes || echo no)
marker="$cache/old-torch-passed/$commit"
if [ "${1:-}" != "--force" ] && [ "$clean" = yes ] && [ -f "$marker" ]; then
    echo "old torch: commit $commit already passed under torch 2.4.1 ($marker)"
    exit 0
fi
start=$(date +%s)
if ! "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.__version__.split("+")[0] != "2.4.1")' 2>/dev/null; then
    echo "old torch: building $venv (torch 2.4.1 from the registry)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'torch==2.4.1'
fi
# This checkout (its dependencies once, then the code itself every run) and the pinned DeepSpeed.
"$venv/bin/pip" install -q . 'deepspeed==0.19.8'
"$venv/bin/pip" install -q --no-deps --force-reinstall .
installed=$(date +%s)
out=$(mktemp -d "${TMPDIR:-/tmp}/preflight-old-torch.XXXXXX")
status=0
(cd "$out" && "$venv/bin/preflight" --cpu --strategy all --report-dir "$out/reports" --timeout 2400 \
    --op-build-timeout 1800) >"$out/preflight.log" 2>&1 || status=$?
tail -n 25 "$out/preflight.log"
"$venv/bin/python" - "$out/reports/preflight.json" "$status" <<'PY'
import json
import sys

report = json.load(open(sys.argv[1]))
status = int(sys.argv[2])
checks = {c["id"].split("::")[-1]: c for c in report["checks"]}
problems = []
if status != 0:
    problems.append(f"preflight exited {status} ({report.get('verdict')})")
problems += [f"{name} ERROR: {c['summary']}" for name, c in checks.items() if c["status"] == "ERROR"]
expected = {"test_ddp_step": "PASS", "test_deepspeed_ops": "PASS", "test_strategy_step[zero1]": "PASS",
            "test_strategy_step[zero2]": "PASS", "test_strategy_step[zero3]": "PASS",
            "test_strategy_step[fsdp]": "SKIP"}
for name, want in expected.items():
    got = checks.get(name, {}).get("status")
    if got != want:
        problems.append(f"{name}: {got} (expected {want}): {checks.get(name, {}).get('summary')}")
if "cannot run FSDP2 on CPU ranks" not in checks.get("test_strategy_step[fsdp]", {}).get("summary", ""):
    problems.append("the FSDP2 SKIP does not give the torch-version reason")
print(f"old torch: torch {report['node'].get('toolkit', {}).get('torch', {}).get('version', '?')}, "
      f"verdict {report.get('verdict')}")
for name in expected:
    c = checks.get(name, {})
    print(f"  {c.get('status', '?'):5} {name}: {c.get('summary', '')[:160]}")
if problems:
    print("old torch: FAILED\n  " + "\n  ".join(problems))
    sys.exit(1)
PY
end=$(date +%s)
echo "old torch: passed (install $((installed - start)) s, preflight $((end - installed)) s; report in $out)"
if [ "$clean" = yes ]; then
    mkdir -p "$(dirname "$marker")" && touch "$marker"
fi
