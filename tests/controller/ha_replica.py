"""One controller replica for the failover tests and bench (run as a process, killed with -9 or
SIGSTOP by the test): PgStore + PgAdvisoryLeadership (or, with HA_LEASE=NAMESPACE/NAME and
HA_KUBECONFIG, a Kubernetes Lease whose takeovers write their epoch into the store) + the real
Controller, acting on a scheduler shared by every replica through a journal file (each call
one line, flock'd).

    python ha_replica.py DSN IDENTITY DIR NODES

DIR/journal.jsonl: one line per scheduler call that changed something (op, node, by, epoch);
DIR/stall-<IDENTITY>: when it exists, this replica's drain() waits 60 s *before* touching the
scheduler (so a test can kill it between the audit insert and the scheduler call);
DIR/status-<IDENTITY>.json: the replica's leadership status and problems, every loop.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from minutiae.clock import SystemClock
from minutiae.controller.ha.k8s_lease import KubeLeaseLeadership
from minutiae.controller.ha.pg_lock import PgAdvisoryLeadership
from minutiae.controller.leadership import Leadership
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store.postgres import PgStore
from minutiae.schedulers.base import NodeSchedState, NodeState, controller_owner
from minutiae.schedulers.kubernetes.config import load_kubeconfig
from minutiae.schedulers.kubernetes.http import KubeClient
from minutiae.schedulers.recording import RecordingBackend

OWNER = controller_owner("hatest", "ctl")


class JournalBackend(RecordingBackend):
    """RecordingBackend whose state is the replay of a journal every replica appends to."""

    def __init__(self, d: Path, nodes: int, me: str, lead: Leadership) -> None:
        super().__init__(name="journal", owner=OWNER)
        self.dir, self.me, self.lead = d, me, lead
        self.journal = d / "journal.jsonl"
        self.names = [f"gpu{i:03d}" for i in range(1, nodes + 1)]

    def _replay(self) -> None:
        self.nodes = {}
        for n in self.names:
            self.add_node(n)
        if self.journal.exists():
            for line in self.journal.read_text().splitlines():
                e = json.loads(line)
                if e["op"] == "drain":
                    self.nodes[e["node"]] = NodeState(e["node"], NodeSchedState.DRAINED,
                                                      reason=e["reason"], ours=True, owner=OWNER)
                elif e["op"] == "resume":
                    self.nodes[e["node"]] = NodeState(e["node"], NodeSchedState.AVAILABLE)

    def _locked(self, op: str, node: str, reason: str | None = None) -> None:
        with open(self.dir / "journal.lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            self._replay()
            before = self.nodes[node].state
            if op == "drain":
                super().drain(node, reason or "")
            else:
                super().resume(node)
            if self.nodes[node].state != before:
                with open(self.journal, "a") as f:
                    f.write(json.dumps({"op": op, "node": node, "by": self.me,
                                        "epoch": self.lead.fence(), "t": time.time(),
                                        "reason": self.nodes[node].reason}) + "\n")

    def state(self, node: str) -> NodeState:
        self._replay()
        return super().state(node)

    def all_states(self) -> dict[str, NodeState]:
        self._replay()
        return super().all_states()

    def drain(self, node: str, reason: str) -> None:
        if (self.dir / f"stall-{self.me}").exists():
            time.sleep(60)
        self._locked("drain", node, reason)

    def resume(self, node: str) -> None:
        self._locked("resume", node)


def main() -> None:
    dsn, me, d, nodes = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    clock = SystemClock()
    store = PgStore(dsn, identity=me, size=2)
    ttl = float(os.environ.get("HA_TTL", "6"))
    lead: Leadership
    if os.environ.get("HA_LEASE"):   # NAMESPACE/NAME on the kube-apiserver of HA_KUBECONFIG
        ns, _, name = os.environ["HA_LEASE"].partition("/")
        lease = KubeLeaseLeadership(KubeClient(load_kubeconfig(os.environ["HA_KUBECONFIG"])),
                                    me, clock, namespace=ns, name=name, lease_s=ttl,
                                    renew_s=0.5, on_won=store.set_epoch)
        lease.start()
        lead = lease
    else:
        pg = PgAdvisoryLeadership(store, me, clock, ttl_s=ttl, renew_s=0.5)
        pg.start()
        lead = pg
    ctl = Controller(store, JournalBackend(d, nodes, me, lead), replace(load_policy(),
                     dry_run=False), clock, owner=OWNER, leadership=lead, sched_ttl_s=1.0)
    out = d / f"status-{me}.json"
    while True:
        ctl.step()
        st = ctl.leadership.status().to_json()
        st["problems"] = [w for _t, w in list(ctl.counters.problems)]
        st["pid"] = os.getpid()
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(st))
        os.replace(tmp, out)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
