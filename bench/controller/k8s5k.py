"""The controller on Kubernetes at fleet size: N Node objects (default 5,000) on the real
kube-apiserver ($MINUTIAE_KUBECONFIG), the real ``Controller`` with its reconcile loop thread
and the real ``KubernetesBackend``, every API request counted by the client's transport.

1. N Node objects (``s17k-NNNNN``, label ``minutiae-bench=k5k``, Ready) are created; every node
   reports healthy once; one full step (the whole fleet read).
2. Trials: one node at a time reports an Xid 79; the cordon is timed from the report to the
   moment a watch on the API server delivers the Node with ``spec.unschedulable`` (p50/p99);
   the API requests the controller made meanwhile are counted by kind, per decision.
3. The same node reports again (unchanged): requests per repeated decision (a condition is
   written only when it changes).
Every Node object is deleted at the end (also on failure). Baseline in the same run: one bare
``PATCH`` of a Node (the floor a cordon cannot beat), as a ratio.

    MINUTIAE_KUBECONFIG=… .venv/bin/python bench/controller/k8s5k.py [--nodes 5000] [--trials 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.clock import SystemClock  # noqa: E402
from minutiae.controller.http.loop import run_loop  # noqa: E402
from minutiae.controller.policy import load_policy  # noqa: E402
from minutiae.controller.service import Controller  # noqa: E402
from minutiae.controller.store import Store  # noqa: E402
from minutiae.schedulers.kubernetes.backend import KubernetesBackend  # noqa: E402
from minutiae.schedulers.kubernetes.config import load_kubeconfig  # noqa: E402
from minutiae.schedulers.kubernetes.http import KubeAPIError, KubeClient  # noqa: E402

LABEL = "minutiae-bench=k5k"
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                 "fallen off the bus."}


class Counting(httpx.HTTPTransport):
    """Counts every request by (method, what): ``nodes`` list, ``node`` get/patch, ``status``,
    ``events``, ``pods``, ``watch``."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.n: Counter[str] = Counter()
        self._mu = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        p = request.url.path
        what = ("watch" if "watch" in str(request.url.query) else
                "status" if p.endswith("/status") else "events" if "/events" in p else
                "pods" if "/pods" in p else "nodes" if p.endswith("/nodes") else
                "node" if "/nodes/" in p else p)
        with self._mu:
            self.n[f"{request.method} {what}"] += 1
        return super().handle_request(request)

    def take(self) -> Counter[str]:
        with self._mu:
            out, self.n = self.n, Counter()
        return out


def report(node: str, bad: bool) -> dict[str, Any]:
    st = "critical" if bad else "ok"
    return {"node": node, "status": st, "checks": [{"check": "gpu", "status": st,
                                                    "findings": [XID79] if bad else []}],
            "domains": {"rack": f"r-{node}"}}


def make_nodes(api: KubeClient, names: list[str]) -> None:
    def one(n: str) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": n, "labels": {"minutiae-bench": "k5k"}},
                "status": {"conditions": [{"type": "Ready", "status": "True",
                                           "reason": "KubeletReady", "message": "bench"}]}}
        try:
            api.post("/api/v1/nodes", body)
        except KubeAPIError as exc:
            if exc.status != 409:
                raise
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one, names))


def drop_nodes(cfg: Any) -> None:
    """Delete every bench Node (a collection delete of 5,000 takes longer than one timeout:
    asked again until none is left)."""
    api = KubeClient(cfg, timeout=300.0)
    for _ in range(10):
        got = api.get("/api/v1/nodes", params={"labelSelector": LABEL, "limit": "1"})
        if not got.get("items"):
            break
        try:
            api.request("DELETE", "/api/v1/nodes", params={"labelSelector": LABEL},
                        ok=(200, 202))
        except KubeAPIError:
            time.sleep(2)
    api.close()


class Watch(threading.Thread):
    """Time of the first event showing each node cordoned (a real watch on the API server)."""

    def __init__(self, cfg: Any, rv: str) -> None:
        super().__init__(daemon=True)
        self.cfg, self.rv = cfg, rv
        self.cordoned: dict[str, float] = {}
        self.stop = False

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.cfg.token}"} if self.cfg.token else {}
        with httpx.Client(base_url=self.cfg.server, verify=self.cfg.verify, cert=self.cfg.cert,
                          headers=headers, timeout=None) as c:
            while not self.stop:
                with c.stream("GET", "/api/v1/nodes", params={
                        "watch": "1", "labelSelector": LABEL, "resourceVersion": self.rv,
                        "timeoutSeconds": "60"}) as r:
                    for line in r.iter_lines():
                        ev = json.loads(line)
                        obj = ev.get("object", {})
                        self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                        name = obj.get("metadata", {}).get("name")
                        if obj.get("spec", {}).get("unschedulable") and name not in self.cordoned:
                            self.cordoned[name] = time.perf_counter()
                        if self.stop:
                            return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--no-watch", action="store_true",
                    help="read states by listing (the backend before its watch cache)")
    a = ap.parse_args()
    kc = os.environ.get("MINUTIAE_KUBECONFIG")
    if not kc:
        sys.exit("k8s5k: MINUTIAE_KUBECONFIG unset (scripts/services/k8s-up.sh)")
    cfg = load_kubeconfig(kc)
    api = KubeClient(cfg)
    names = [f"s17k-{i:05d}" for i in range(a.nodes)]
    t0 = time.perf_counter()
    print(f"== Kubernetes: {a.nodes} Node objects on the real kube-apiserver; load "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs ==", flush=True)
    try:
        make_nodes(api, names)
        print(f"created {a.nodes} nodes in {time.perf_counter() - t0:.1f} s", flush=True)
        run(cfg, api, names, a.trials, not a.no_watch)
    finally:
        api.close()
        drop_nodes(cfg)


def run(cfg: Any, api: KubeClient, names: list[str], trials: int, watch: bool) -> None:
    count = Counting(verify=cfg.verify, cert=cfg.cert)
    be = KubernetesBackend(cfg, SystemClock(), owner="bench/k5k", transport=count,
                           watch=watch)
    # the watch cache's own client (list pages and watches) is counted too
    KubeClient.streaming = lambda self: httpx.Client(  # type: ignore[method-assign]
        timeout=10.0, transport=count, **self._args)
    pol = load_policy()
    b = pol.budget
    # the mechanism, not the budget: no rate limit or domain cap holds a trial's drain
    pol = replace(pol, dry_run=False, budget=replace(
        b, domain_caps={}, rates={k: replace(v, per_minute=6000.0, burst=6000.0)
                                  for k, v in b.rates.items()}))
    with tempfile.TemporaryDirectory() as t:
        ctl = Controller(Store(Path(t) / "c.db"), be, pol, SystemClock(), owner="bench/k5k")
        for n in names:
            ctl.ingest(report(n, False))
        s0 = time.perf_counter()
        ctl.step()
        if watch:   # the cache lists once, then watches
            while be._synced() is None:
                time.sleep(0.1)
            ctl.step()
        full = count.take()
        print(f"one full step over {len(names)} nodes: {time.perf_counter() - s0:.2f} s, "
              f"{sum(full.values())} API requests ({dict(full)})", flush=True)
        rv = api.get("/api/v1/nodes", params={"labelSelector": LABEL, "limit": "1"})[
            "metadata"]["resourceVersion"]
        w = Watch(cfg, rv)
        w.start()
        stop = threading.Event()
        loop = threading.Thread(target=run_loop, args=(ctl, 5.0, stop), daemon=True)
        loop.start()
        time.sleep(1.0)
        count.take()
        lat, per = trial_loop(ctl, w, names, trials, count)
        stop.set()
        ctl.wake.set()
        w.stop = True
        summary(api, names, lat, per, trials)


def trial_loop(ctl: Controller, w: Watch, names: list[str], trials: int, count: Counting
               ) -> tuple[list[float], dict[str, Counter[str]]]:
    lat: list[float] = []
    per: dict[str, Counter[str]] = {"decision": Counter(), "repeat": Counter(), "idle": Counter()}
    step = max(1, len(names) // max(1, trials))
    for i in range(trials):
        node = names[(i * step + 7) % len(names)]
        t0 = time.perf_counter()
        ctl.ingest(report(node, True))
        end = t0 + 15.0
        while node not in w.cordoned and time.perf_counter() < end:
            time.sleep(0.002)
        if node in w.cordoned:
            lat.append(w.cordoned[node] - t0)
        time.sleep(0.3)                       # the step after the drain re-reads the node
        per["decision"] += count.take()
        ctl.ingest(report(node, True))        # the same evidence again: nothing to write
        ctl.wake.set()
        time.sleep(0.4)
        per["repeat"] += count.take()
    time.sleep(5.5)                            # one idle interval
    per["idle"] += count.take()
    return lat, per


def summary(api: KubeClient, names: list[str], lat: list[float],
            per: dict[str, Counter[str]], trials: int) -> None:
    base = []
    for n in names[:20]:
        t0 = time.perf_counter()
        api.patch(f"/api/v1/nodes/{n}", {"metadata": {"annotations": {"bench/ping": str(t0)}}})
        base.append(time.perf_counter() - t0)
    lat.sort()
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    print(f"cordon (report -> Node cordoned, seen by a watch): {len(lat)}/{trials} trials, p50 "
          f"{1e3 * p50:.0f} ms, p99 {1e3 * p99:.0f} ms, max {1e3 * lat[-1]:.0f} ms; baseline "
          f"bare PATCH p50 {1e3 * statistics.median(base):.0f} ms (ratio "
          f"{p50 / statistics.median(base):.1f}); load {os.getloadavg()[0]:.2f}", flush=True)
    for k, c in per.items():
        n = trials if k != "idle" else 1
        print(f"API requests per {k if k != 'idle' else 'idle 5 s interval'}: "
              f"{sum(c.values()) / n:.1f} ({', '.join(f'{v / n:.1f} {m}' for m, v in sorted(c.items()))})",
              flush=True)


if __name__ == "__main__":
    main()
