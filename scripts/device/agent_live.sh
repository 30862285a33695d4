#!/bin/bash
# On a GPU node: the node agent live for a few cycles (NVML, sysfs, /dev/kmsg), its /metrics
# scraped, its peak RSS read, and a fresh NVML recording and sysfs copy (with the taint flags).
# Run from the repository root: bash scripts/device/agent_live.sh OUT_DIR
set -u
OUT=${1:?usage: agent_live.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
M="python3 -m minutiae.cli.main"
python3 scripts/device/sysfs_copy.py "$OUT/tree" >"$OUT/sysfs-copy.txt" 2>&1
python3 scripts/device/nvml_record.py "$OUT/nvml" >"$OUT/nvml-record.txt" 2>&1
$M check --json --node h200 >"$OUT/check-live.json" 2>"$OUT/check-live.err"; echo "check rc=$?" >>"$OUT/steps.txt"

$M agent --interval 2 --cycles 8 --state-dir "$OUT/agent-state" --metrics-listen 127.0.0.1:19470 \
  --node h200 >"$OUT/agent.log" 2>&1 &
PID=$!
sleep 9
python3 - "$OUT" "$PID" <<'EOF'
import sys, urllib.request
out, pid = sys.argv[1], sys.argv[2]
body = urllib.request.urlopen("http://127.0.0.1:19470/metrics", timeout=10).read()
open(f"{out}/agent-metrics.txt", "wb").write(body)
status = open(f"/proc/{pid}/status").read()
rss = {l.split(":")[0]: l.split(":")[1].strip() for l in status.splitlines() if l.startswith(("VmRSS", "VmHWM"))}
open(f"{out}/agent-rss.txt", "w").write(f"{rss}\n")
print("metrics bytes", len(body), rss)
EOF
wait $PID; echo "agent rc=$?" >>"$OUT/steps.txt"
cat "$OUT/steps.txt"
