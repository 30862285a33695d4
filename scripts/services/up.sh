#!/usr/bin/env bash
# Start every real service the tests use, under DIR; write DIR/env with the variables tests read.
# Usage: up.sh DIR
set -euo pipefail
DIR=${1:?usage: up.sh DIR}; HERE=$(cd "$(dirname "$0")" && pwd)
# MINUTIAE_PORT_OFFSET=N moves every port by N, so a second set (a clean-clone CI run beside the
# developers' set) can run on the same machine; 0 (the default) keeps the documented ports.
O=${MINUTIAE_PORT_OFFSET:-0}
export MINUTIAE_PORT_OFFSET=$O
"$HERE/down.sh" "$DIR" || true
mkdir -p "$DIR"
"$HERE/install.sh"
"$HERE/slurm-up.sh" "$DIR/slurm" 64
"$HERE/prom-up.sh" "$DIR/prom" $((19090 + O))
"$HERE/alertmanager-up.sh" "$DIR/alertmanager" $((19093 + O)) http://127.0.0.1:$((19094 + O))/alerts
"$HERE/k8s-up.sh" "$DIR/k8s" $((16443 + O))
"$HERE/postgres-up.sh" "$DIR/pg" $((15432 + O))
cat > "$DIR/env" <<ENV
export MINUTIAE_SLURM_CONF=$DIR/slurm/slurm.conf
export MINUTIAE_PROM_URL=http://127.0.0.1:$((19090 + O))
export MINUTIAE_PROM_TARGETS=$DIR/prom/targets.json
export MINUTIAE_ALERTMANAGER_URL=http://127.0.0.1:$((19093 + O)) MINUTIAE_ALERTMANAGER_WEBHOOK=http://127.0.0.1:$((19094 + O))/alerts
export MINUTIAE_KUBECONFIG=$DIR/k8s/kubeconfig
export MINUTIAE_PG_DSN=postgresql://minutiae@127.0.0.1:$((15432 + O))/minutiae
ENV
echo "services up; variables in $DIR/env"
