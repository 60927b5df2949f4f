#!/bin/sh
# node-problem-detector custom plugin: report the node's last preflight result.
#
# preflight itself runs elsewhere (the Kubernetes DaemonSet/Job in deploy/kubernetes, a Slurm
# health check, a systemd timer); it takes longer than NPD's plugin timeout. Its runner writes
# STATUS as "<exit code> <status line>" (preflight-node.sh does). This plugin only reads it.
# NPD's contract: exit 0 OK, 1 NonOK, 2 Unknown; stdout (cut at 80 characters) is the message.
#   missing or unreadable status  -> 2 "preflight has not run on this node"
#   older than PREFLIGHT_MAX_AGE_S -> 2 "preflight result is stale"
#   exit code 0 / 1 / other        -> 0 / 1 / 2 with the status line

STATUS="${PREFLIGHT_STATUS_FILE:-/var/lib/preflight/status}"
MAX_AGE_S="${PREFLIGHT_MAX_AGE_S:-90000}"  # 25 h: a daily run plus slack

say() { printf '%s\n' "$1" | cut -c1-80; }

if [ ! -r "$STATUS" ]; then
    say "preflight has not run on this node (no $STATUS)"
    exit 2
fi
now=$(date +%s)
changed=$(stat -c %Y "$STATUS" 2>/dev/null || echo 0)
age=$((now - changed))
if [ "$age" -gt "$MAX_AGE_S" ]; then
    say "preflight result is stale (${age} s old)"
    exit 2
fi
read -r code line <"$STATUS" || true
case "$code" in
    0) say "${line:-READY}"; exit 0 ;;
    1) say "${line:-NOT READY}"; exit 1 ;;
    *) say "${line:-preflight status unreadable}"; exit 2 ;;
esac
