#!/bin/bash
# Capture a GPU node for minutiae's tests and run minutiae's node commands on it, live.
# Run from the repository root on the GPU node: bash scripts/device/capture.sh OUT_DIR
# Needs python3 with click, psutil and nvidia-ml-py (no install of minutiae: PYTHONPATH=src);
# torch is optional (a load phase: matmuls plus a one-rank NCCL all-reduce that dumps NCCL's
# topology). Every step has its own time limit and its exit code is kept in OUT/steps.txt.
set -u
OUT=${1:?usage: capture.sh OUT_DIR}
mkdir -p "$OUT/cmd" "$OUT/minutiae"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
M="python3 -m minutiae.cli.main"

step() {  # step NAME SECONDS OUTFILE CMD...
  local name=$1 secs=$2 out=$3; shift 3
  local t0=$(date +%s%N)
  timeout -k 5 "$secs" "$@" >"$out" 2>"$out.err"
  local rc=$?
  printf '%-28s rc=%-3s %6d ms\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )) | tee -a "$OUT/steps.txt"
  [ -s "$out.err" ] || rm -f "$out.err"
}

C=$OUT/cmd
step uname 5 $C/uname.txt uname -a
step nvidia-smi-version 20 $C/nvidia-smi-version.txt nvidia-smi --version
step nvidia-smi 20 $C/nvidia-smi.txt nvidia-smi
step nvidia-smi-q-x 30 $C/nvidia-smi-q-x.xml nvidia-smi -q -x
step nvidia-smi-q 30 $C/nvidia-smi-q.txt nvidia-smi -q
step topo-m 20 $C/nvidia-smi-topo-m.txt nvidia-smi topo -m
step topo-p2p 20 $C/nvidia-smi-topo-p2p-r.txt nvidia-smi topo -p2p r
step nvlink-status 20 $C/nvidia-smi-nvlink-status.txt nvidia-smi nvlink --status
step nvlink-errors 20 $C/nvidia-smi-nvlink-e.txt nvidia-smi nvlink -e
step query-gpu 20 $C/nvidia-smi-query-gpu.csv nvidia-smi --format=csv --query-gpu=index,name,pci.bus_id,uuid,driver_version,vbios_version,pstate,clocks_event_reasons.active,temperature.gpu,power.draw,power.limit,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,retired_pages.pending,clocks.sm,clocks.mem,utilization.gpu,memory.used,memory.total
step which 5 $C/which.txt bash -c 'for t in dcgm-exporter dcgmi nv-hostengine lspci lstopo lstopo-no-graphics numactl ibstat ibv_devinfo perfquery dmesg journalctl nvidia-bug-report.sh; do printf "%s " $t; command -v $t || echo -; done'
step lspci 20 $C/lspci-vvv.txt lspci -vvv -nn
step lstopo 30 $C/hwloc.xml lstopo-no-graphics --of xml
step numactl 10 $C/numactl-H.txt numactl -H
step dmesg 15 $C/dmesg.txt dmesg
step dmesg-T 15 $C/dmesg-T.txt dmesg -T
step kmsg 10 $C/kmsg.txt python3 -c 'import os
fd=os.open("/dev/kmsg",os.O_RDONLY|os.O_NONBLOCK); out=[]
while True:
    try: b=os.read(fd,8192)
    except BlockingIOError: break
    except OSError as e:
        if e.errno==32: continue
        raise
    if not b: break
    out.append(b)
os.write(1,b"".join(out))'
step sysfs-copy 60 $OUT/sysfs-copy.txt python3 scripts/device/sysfs_copy.py $OUT/tree
step nvml-record 60 $OUT/nvml-record.txt python3 scripts/device/nvml_record.py $OUT/nvml

D=$OUT/minutiae
step check-live 60 $D/check-live.json $M check --json --state-file $OUT/state.json --node h200
step check-live-text 60 $D/check-live.txt $M check --node h200
step check-live-again 60 $D/check-live-again.json $M check --json --state-file $OUT/state.json --node h200
step check-xml 60 $D/check-xml.json $M check --json --no-nvml --nvidia-smi-xml $C/nvidia-smi-q-x.xml --node h200 --kmsg $C/kmsg.txt
step check-q 60 $D/check-q.json $M check --json --no-nvml --nvidia-smi-xml $C/nvidia-smi-q.txt --node h200 --kmsg $C/kmsg.txt
step check-replay 60 $D/check-replay.json $M check --json --no-nvml --nvidia-smi-xml $C/nvidia-smi-q-x.xml --sysfs-root $OUT/tree/sys --kmsg $C/kmsg.txt --node h200
step logscan-kmsg 60 $D/logscan-kmsg.txt $M logscan $C/kmsg.txt
step logscan-dmesg 60 $D/logscan-dmesg.txt $M logscan $C/dmesg.txt
step topo-live 60 $D/topo-live.json $M topo --json
step topo-live-text 60 $D/topo-live.txt $M topo
step topo-plan 60 $D/topo-plan.txt $M topo --plan
step topo-plan-torchrun 60 $D/topo-plan-torchrun.txt $M topo --plan --format torchrun
step topo-check 60 $D/topo-check.txt $M topo --check
step topo-from-m 60 $D/topo-from-m.json $M topo --json --from $C/nvidia-smi-topo-m.txt
step topo-replay 60 $D/topo-replay.json $M topo --json --sysfs-root $OUT/tree/sys
step rss-check 60 $D/rss-check.txt python3 -c 'import resource,subprocess,sys
subprocess.run([sys.executable,"-m","minutiae.cli.main","check","--json","--node","h200"],stdout=subprocess.DEVNULL)
print("check peak RSS KiB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)'

# load phase: bf16 matmuls for ~25 s and a one-rank NCCL all-reduce that dumps NCCL's topology;
# nvidia-smi and minutiae check read the GPU while it runs
L=$OUT/load
mkdir -p $L
cat >$L/load.py <<'EOF'
import os, time, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
print("all_reduce ok", float(x[0]), flush=True)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
t_end = time.time() + float(os.environ.get("LOAD_S", "25")); n = 0; t0 = time.time()
while time.time() < t_end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize(); n += 20
print(f"matmuls {n} in {time.time()-t0:.1f}s: {n*2*8192**3/(time.time()-t0)/1e12:.0f} TFLOP/s", flush=True)
dist.destroy_process_group()
EOF
( NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV NCCL_TOPO_DUMP_FILE=$L/nccl-topo.xml \
  NCCL_GRAPH_DUMP_FILE=$L/nccl-graph.xml LOAD_S=25 timeout -k 5 90 python3 $L/load.py >$L/load.log 2>&1; echo "load rc=$?" >>$OUT/steps.txt ) &
LOADPID=$!
sleep 12
step loaded-q-x 30 $L/nvidia-smi-q-x-loaded.xml nvidia-smi -q -x
step loaded-check 60 $L/check-loaded.json $M check --json --node h200
step loaded-dmon 30 $L/nvidia-smi-dmon.txt nvidia-smi dmon -c 5 -s pucvmet
step loaded-query 20 $L/nvidia-smi-query-loaded.csv nvidia-smi --format=csv --query-gpu=index,pstate,clocks_event_reasons.active,temperature.gpu,power.draw,clocks.sm,clocks.mem,utilization.gpu
wait $LOADPID
step after-kmsg 10 $C/kmsg-after.txt dmesg

du -sh $OUT/* | tee -a $OUT/steps.txt
