#!/usr/bin/env bash
# Start every real service the tests use, under DIR; write DIR/env with the variables tests read.
# Usage: up.sh DIR
set -euo pipefail
DIR=${1:?usage: up.sh DIR}; HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/down.sh" "$DIR" || true
mkdir -p "$DIR"
"$HERE/install.sh"
"$HERE/slurm-up.sh" "$DIR/slurm" 64
"$HERE/prom-up.sh" "$DIR/prom" 19090
"$HERE/alertmanager-up.sh" "$DIR/alertmanager" 19093 http://127.0.0.1:19094/alerts
"$HERE/k8s-up.sh" "$DIR/k8s" 16443
"$HERE/postgres-up.sh" "$DIR/pg" 15432
cat > "$DIR/env" <<ENV
export MINUTIAE_SLURM_CONF=$DIR/slurm/slurm.conf
export MINUTIAE_PROM_URL=http://127.0.0.1:19090
export MINUTIAE_PROM_TARGETS=$DIR/prom/targets.json
export MINUTIAE_ALERTMANAGER_URL=http://127.0.0.1:19093 MINUTIAE_ALERTMANAGER_WEBHOOK=http://127.0.0.1:19094/alerts
export MINUTIAE_KUBECONFIG=$DIR/k8s/kubeconfig
export MINUTIAE_PG_DSN=postgresql://minutiae@127.0.0.1:15432/minutiae
ENV
echo "services up; variables in $DIR/env"
