#!/usr/bin/env bash
# Start a local Slurm cluster of N fake GPU nodes (one slurmd per node, all on this host).
# Usage: slurm-up.sh DIR [N]   (prints nothing on success; SLURM_CONF=DIR/slurm.conf)
set -euo pipefail
DIR=${1:?usage: slurm-up.sh DIR [N]}; N=${2:-64}
HOST=$(hostname -s); O=${MINUTIAE_PORT_OFFSET:-0}  # see up.sh
mkdir -p "$DIR"/{state,log,spool,dev}
cat > "$DIR/slurm.conf" <<CONF
ClusterName=minutiae
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPort=$((6817 + O))
SlurmdPort=$((6818 + O))
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmdSpoolDir=$DIR/spool/%n
StateSaveLocation=$DIR/state
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdTimeout=30
GresTypes=gpu
NodeName=gpu[001-$(printf '%03d' "$N")] NodeHostname=${HOST} NodeAddr=127.0.0.1 Port=[$((17001 + O))-$((17000 + O + N))] CPUs=2 RealMemory=1000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
for g in 0 1 2 3 4 5 6 7; do ln -sf /dev/null "$DIR/dev/nvidia$g"; done
printf 'AutoDetect=off\nName=gpu Type=h100 File=%s/dev/nvidia[0-7]\n' "$DIR" > "$DIR/gres.conf"
export SLURM_CONF=$DIR/slurm.conf
mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
slurmctld -f "$SLURM_CONF" -i
for i in $(seq 1 "$N"); do
  n=$(printf 'gpu%03d' "$i"); mkdir -p "$DIR/spool/$n"
  slurmd -f "$SLURM_CONF" -N "$n"
done
for _ in $(seq 1 300); do
  [ "$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)" -ge "$N" ] && exit 0
  sleep 0.2
done
echo "slurm-up: not all $N nodes became idle" >&2; sinfo >&2; exit 1
