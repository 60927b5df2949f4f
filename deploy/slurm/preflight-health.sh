#!/bin/sh
# preflight as a Slurm HealthCheckProgram or Prolog.
#
# Runs `preflight --profile quick --oneline` on this node. NOT READY drains the node with the
# failing check's code as the reason ("preflight NOT READY: DDP_RANK_HUNG (+2 more) - ...");
# a node that preflight drained earlier is resumed once it passes again. Nodes drained for any
# other reason are left alone. "Could not run" (exit 2) only logs, unless
# PREFLIGHT_DRAIN_ON_UNKNOWN=1.
#
# slurm.conf:   HealthCheckProgram=/usr/local/sbin/preflight-health.sh
#               HealthCheckInterval=3600
#               HealthCheckNodeState=IDLE      # never run the checks under a user's job
#   or Prolog:  Prolog=/usr/local/sbin/preflight-health.sh   (a non-zero exit also requeues the job)
# Slurm kills a HealthCheckProgram after 60 s: the quick profile runs under PREFLIGHT_TIMEOUT.
#
# Settings (environment, or the file PREFLIGHT_CONFIG, default /etc/default/preflight-slurm):
#   PREFLIGHT              the preflight command (default: preflight, looked up on PATH below)
#   PREFLIGHT_ARGS         extra options, e.g. "--expect-gpus 8"
#   PREFLIGHT_REPORT_DIR   where reports go (default /var/lib/preflight)
#   PREFLIGHT_TIMEOUT      preflight's overall deadline in seconds (default 50)
#   PREFLIGHT_PROMETHEUS   also write this .prom file (node_exporter textfile collector)
#   PREFLIGHT_NODE         the Slurm node name (default $SLURMD_NODENAME, else `hostname -s`)
#   SCONTROL               the scontrol command (default scontrol)
# Arguments given to this script are passed on to preflight.
# Exit code: preflight's (0 ready or degraded, 1 not ready, 2 could not run).

CONFIG="${PREFLIGHT_CONFIG:-/etc/default/preflight-slurm}"
# shellcheck disable=SC1090
[ -r "$CONFIG" ] && . "$CONFIG"

PATH="${PATH:+$PATH:}/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"  # slurmd sets no PATH for Prolog
PREFLIGHT="${PREFLIGHT:-preflight}"
REPORT_DIR="${PREFLIGHT_REPORT_DIR:-/var/lib/preflight}"
TIMEOUT="${PREFLIGHT_TIMEOUT:-50}"
SCONTROL="${SCONTROL:-scontrol}"
NODE="${PREFLIGHT_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}"
LOG="$REPORT_DIR/preflight-health.log"
REASON_PREFIX="preflight"

log() { printf '%s preflight-health[%s]: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$NODE" "$*" >>"$LOG"; }

mkdir -p "$REPORT_DIR" || { echo "preflight-health: cannot create $REPORT_DIR" >&2; exit 2; }

set -- --profile quick --oneline --report-dir "$REPORT_DIR" --timeout "$TIMEOUT" \
    ${PREFLIGHT_PROMETHEUS:+--prometheus "$PREFLIGHT_PROMETHEUS"} $PREFLIGHT_ARGS "$@"
# A second, outer deadline in case preflight itself cannot stop (e.g. stuck in the driver).
if command -v timeout >/dev/null 2>&1; then
    timeout -k 5 "$((TIMEOUT + 5))" $PREFLIGHT "$@" >"$REPORT_DIR/preflight-health.out" 2>&1
else
    $PREFLIGHT "$@" >"$REPORT_DIR/preflight-health.out" 2>&1
fi
rc=$?

# The status line comes from the JSON just written (the report is the source of truth).
line=$($PREFLIGHT report "$REPORT_DIR/preflight.json" --oneline 2>/dev/null)
[ -n "$line" ] || line="UNKNOWN: preflight could not run (exit $rc), see $LOG"
log "exit $rc: $line"

current_reason() {
    $SCONTROL show node "$NODE" 2>/dev/null | sed -n 's/^ *Reason=\(.*\) \[.*\]$/\1/p'
}

case "$rc" in
    0)
        case "$(current_reason)" in
            "$REASON_PREFIX"*)
                $SCONTROL update nodename="$NODE" state=resume && log "resumed: preflight passes again" ;;
        esac
        ;;
    1)
        $SCONTROL update nodename="$NODE" state=drain reason="$REASON_PREFIX $line" \
            && log "drained: $REASON_PREFIX $line" || log "could not drain $NODE"
        ;;
    *)
        if [ "${PREFLIGHT_DRAIN_ON_UNKNOWN:-0}" = 1 ]; then
            $SCONTROL update nodename="$NODE" state=drain reason="$REASON_PREFIX $line" && log "drained (could not run)"
        fi
        rc=2
        ;;
esac
exit "$rc"
