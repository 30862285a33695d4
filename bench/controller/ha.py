"""Failover on PostgreSQL (or, with ``--lease``, a Kubernetes Lease on the real kube-apiserver):
N trials (default 20: half kill -9 of the leader between its audit
insert and its scheduler call, half SIGSTOP of the leader, a report, SIGCONT), each on two
fresh controller processes (tests/controller/ha_replica.py: the real Controller, PgStore and
advisory-lock leadership, a scheduler journal every replica shares).

Per trial: failover time (kill / stop -> the standby's drain in the journal) and the count of
double actions (a node drained more than once, or by the deposed leader) and lost ones (an
audit row left pending, or a report that should drain and never did). Failover time is
printed as a ratio to the 15 s goal (there is no HA baseline to run beside it: one SQLite
process has no standby).

    MINUTIAE_PG_DSN=postgresql://… [MINUTIAE_KUBECONFIG=…] .venv/bin/python bench/controller/ha.py
        [--trials 20] [--lease]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "controller"))

from ha_support import fresh_schema_dsn  # noqa: E402
from test_ha_failover import Cluster, two_replicas, wait_for  # noqa: E402


def trial(kind: str, tmp: Path, lease: bool) -> tuple[float, int, int]:
    """(failover seconds, double actions, lost actions) of one trial."""
    env = {"HA_LEASE": f"default/minutiae-ha-{uuid.uuid4().hex[:8]}",
           "HA_KUBECONFIG": os.environ["MINUTIAE_KUBECONFIG"]} if lease else None
    c = Cluster(fresh_schema_dsn(), tmp, env=env)
    try:
        two_replicas(c)
        a = c.procs["ctl-a"]
        if kind == "kill":
            (c.dir / "stall-ctl-a").touch()
            c.report("gpu001")
            wait_for("pending", lambda: ("drain", "pending", 1) in c.audit("gpu001"))
            t0 = time.monotonic()
            a.kill()
        else:
            a.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            c.report("gpu001")
        try:   # the measurement itself: a miss is a failed trial, never "not run"
            wait_for("takeover drain", lambda: c.journal("gpu001"), timeout=120)
        except AssertionError:
            return float("inf"), 0, 1
        took = time.monotonic() - t0
        if kind == "stop":
            a.send_signal(signal.SIGCONT)
            c.report("gpu002")
            wait_for("second drain", lambda: c.journal("gpu002"), timeout=30)
        time.sleep(1.5)
        nodes = ["gpu001"] + (["gpu002"] if kind == "stop" else [])
        j = c.journal()
        double = sum(max(0, len([e for e in j if e["node"] == n]) - 1) for n in nodes)
        double += sum(1 for e in j if e["by"] == "ctl-a")
        lost = sum(1 for n in nodes if not c.journal(n))
        lost += sum(1 for n in nodes for _a, st, _e in c.audit(n) if st == "pending")
        return took, double, lost
    finally:
        c.stop()
        if env is not None:
            drop_lease(env["HA_LEASE"])


def drop_lease(spec: str) -> None:
    from minutiae.schedulers.kubernetes.config import load_kubeconfig
    from minutiae.schedulers.kubernetes.http import KubeClient

    ns, _, name = spec.partition("/")
    client = KubeClient(load_kubeconfig(os.environ["MINUTIAE_KUBECONFIG"]))
    client.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                   ok=(200, 202, 404))
    client.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--lease", action="store_true",
                    help="elect by a Kubernetes Lease on $MINUTIAE_KUBECONFIG's apiserver")
    a = ap.parse_args()
    if not os.environ.get("MINUTIAE_PG_DSN"):
        sys.exit("ha bench: MINUTIAE_PG_DSN unset (scripts/services/postgres-up.sh)")
    if a.lease and not os.environ.get("MINUTIAE_KUBECONFIG"):
        sys.exit("ha bench: --lease needs MINUTIAE_KUBECONFIG (scripts/services/k8s-up.sh)")
    how = "a Kubernetes Lease (+ the store's epoch)" if a.lease else "PostgreSQL advisory lock"
    print(f"== failover by {how}: {a.trials} trials (kill -9 mid-action / SIGSTOP "
          f"partition), lease ttl 6 s; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs ==")
    res: dict[str, list[tuple[float, int, int]]] = {"kill": [], "stop": []}
    loads = []
    with tempfile.TemporaryDirectory() as t:
        for i in range(a.trials):
            kind = "kill" if i % 2 == 0 else "stop"
            d = Path(t) / f"trial{i}"
            d.mkdir()
            try:
                res[kind].append(trial(kind, d, a.lease))
            except AssertionError as exc:   # a setup that timed out is said, not counted
                print(f"trial {i + 1:2d} {kind:<4} NOT RUN: {exc}", flush=True)
                continue
            loads.append(os.getloadavg()[0])
            took, dbl, lost = res[kind][-1]
            print(f"trial {i + 1:2d} {kind:<4} failover {took:5.2f} s  double {dbl}  lost {lost}",
                  flush=True)
    for kind, rows in res.items():
        if rows:
            ts = [r[0] for r in rows]
            print(f"{kind:<4}: {len(rows)} trials, failover median {statistics.median(ts):.2f} s "
                  f"(max {max(ts):.2f} s; goal 15 s: ratio {max(ts) / 15:.2f}; over 15 s: "
                  f"{sum(1 for x in ts if x > 15)}), double {sum(r[1] for r in rows)}, lost "
                  f"{sum(r[2] for r in rows)}")
    print(f"load average while measuring: median {statistics.median(loads):.2f}")


if __name__ == "__main__":
    main()
