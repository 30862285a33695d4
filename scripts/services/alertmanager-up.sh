#!/usr/bin/env bash
# Start Alertmanager (Debian's prometheus-alertmanager) on 127.0.0.1:PORT, clustering off, with
# one webhook receiver (default http://127.0.0.1:PORT+1/alerts: the e2e test listens there) and
# short group waits so a test sees a firing alert within seconds. Usage:
#   alertmanager-up.sh DIR [PORT] [WEBHOOK_URL]
set -euo pipefail
DIR=${1:?usage: alertmanager-up.sh DIR [PORT] [WEBHOOK_URL]}; PORT=${2:-19093}
HOOK=${3:-http://127.0.0.1:$((PORT + 1))/alerts}
AM=$(command -v prometheus-alertmanager || command -v alertmanager || true)
[ -n "$AM" ] || { echo "alertmanager-up: prometheus-alertmanager is not installed" >&2; exit 1; }
mkdir -p "$DIR/data"
cat > "$DIR/alertmanager.yml" <<CONF
route:
  receiver: webhook
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: webhook
    webhook_configs:
      - url: '$HOOK'
        send_resolved: true
CONF
"$AM" --config.file="$DIR/alertmanager.yml" --storage.path="$DIR/data" \
  --web.listen-address=127.0.0.1:$PORT --cluster.listen-address= \
  >"$DIR/alertmanager.log" 2>&1 &
echo $! > "$DIR/alertmanager.pid"
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null && exit 0; sleep 0.1; done
echo "alertmanager-up: alertmanager did not become ready" >&2; tail -20 "$DIR/alertmanager.log" >&2; exit 1
