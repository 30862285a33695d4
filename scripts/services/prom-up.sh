#!/usr/bin/env bash
# Start Prometheus on 127.0.0.1:PORT with a file-based scrape target list (DIR/targets.json)
# that tests rewrite to point at whatever they serve. Usage: prom-up.sh DIR [PORT]
set -euo pipefail
DIR=${1:?usage: prom-up.sh DIR [PORT]}; PORT=${2:-19090}
mkdir -p "$DIR/data"
[ -f "$DIR/targets.json" ] || echo '[]' > "$DIR/targets.json"
cat > "$DIR/prometheus.yml" <<CONF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: minutiae
    file_sd_configs: [{files: ['$DIR/targets.json'], refresh_interval: 1s}]
CONF
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/data" \
  --web.listen-address=127.0.0.1:$PORT --web.enable-lifecycle \
  >"$DIR/prometheus.log" 2>&1 &
echo $! > "$DIR/prometheus.pid"
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null && exit 0; sleep 0.1; done
echo "prom-up: prometheus did not become ready" >&2; tail -20 "$DIR/prometheus.log" >&2; exit 1
