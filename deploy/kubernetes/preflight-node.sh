#!/bin/sh
# Runs in a pod on one GPU node (Job or DaemonSet init container): preflight, then the verdict
# becomes node labels, and NOT READY a NoSchedule taint carrying the failing check's code.
#
#   preflight/verdict=READY|DEGRADED|NOT_READY|UNKNOWN   preflight/code=<CODE>   (labels)
#   preflight/not-ready=<CODE>:NoSchedule                                      (taint, NOT READY only)
#
# A passing run removes the taint, and also PREFLIGHT_GATE_TAINT when set: a node registered
# with that taint (kubelet --register-with-taints=preflight/pending=:NoSchedule) gets work only
# after preflight accepted it. The report, the .prom file and a one-line status file (read by
# the node-problem-detector plugin) are written to PREFLIGHT_REPORT_DIR (a hostPath).
# Needs NODE_NAME (downward API spec.nodeName) and RBAC to get and patch nodes.
# Exit code: preflight's (0 ready or degraded, 1 not ready, 2 could not run).

NODE="${NODE_NAME:?NODE_NAME must be set (downward API: spec.nodeName)}"
PREFLIGHT="${PREFLIGHT:-preflight}"
KUBECTL="${KUBECTL:-kubectl}"
OUT="${PREFLIGHT_REPORT_DIR:-/var/lib/preflight}"
PROFILE="${PREFLIGHT_PROFILE:-quick}"

mkdir -p "$OUT"
$PREFLIGHT --profile "$PROFILE" --oneline --report-dir "$OUT" --prometheus "$OUT/preflight.prom" $PREFLIGHT_ARGS "$@"
rc=$?
line=$($PREFLIGHT report "$OUT/preflight.json" --oneline 2>/dev/null)
[ -n "$line" ] || line="UNKNOWN: preflight could not run (exit $rc)"
case "$rc" in 0|1) ;; *) rc=2 ;; esac
# "<exit code> <status line>", replaced atomically: what the NPD plugin reads.
printf '%s %s\n' "$rc" "$line" >"$OUT/status.tmp" && mv -f "$OUT/status.tmp" "$OUT/status"
echo "preflight on $NODE: $line"

verdict=$(printf '%s' "$line" | sed -En 's/^(READY|DEGRADED|NOT READY).*/\1/p' | tr ' ' '_')
code=$(printf '%s' "$line" | sed -En 's/^[A-Z ]*: ([A-Z][A-Z0-9_]*).*/\1/p' | cut -c1-63)
case "$rc" in
    0)
        $KUBECTL label node "$NODE" --overwrite "preflight/verdict=${verdict:-READY}" "preflight/code=${code}"
        $KUBECTL taint node "$NODE" preflight/not-ready:NoSchedule- 2>/dev/null || true
        if [ -n "$PREFLIGHT_GATE_TAINT" ]; then
            $KUBECTL taint node "$NODE" "$PREFLIGHT_GATE_TAINT-" 2>/dev/null || true
        fi
        ;;
    1)
        $KUBECTL label node "$NODE" --overwrite "preflight/verdict=NOT_READY" "preflight/code=${code:-UNKNOWN}"
        $KUBECTL taint node "$NODE" --overwrite "preflight/not-ready=${code:-UNKNOWN}:NoSchedule"
        ;;
    *)
        $KUBECTL label node "$NODE" --overwrite "preflight/verdict=UNKNOWN" "preflight/code="
        ;;
esac
exit "$rc"
