#!/usr/bin/env bash
# Stop the services started by up.sh (by pid; there is no systemd here).
DIR=${1:?usage: down.sh DIR}
for f in "$DIR"/slurm/slurmd-*.pid "$DIR"/slurm/slurmctld.pid "$DIR"/prom/prometheus.pid "$DIR"/alertmanager/alertmanager.pid "$DIR"/k8s/apiserver.pid "$DIR"/k8s/etcd.pid "$DIR"/pg/postgres.pid; do
  [ -f "$f" ] || continue
  pid=$(cat "$f"); kill "$pid" 2>/dev/null; rm -f "$f"
done
sleep 0.5
exit 0
