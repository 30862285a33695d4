"""Leader election on Kubernetes: a ``coordination.k8s.io/v1`` Lease, client-go style.

- Free (no Lease, or its record unchanged for ``lease_s`` by *our* monotonic clock: no trust
  in the other holder's wall clock): take it with a create, or an update that carries the
  observed ``resourceVersion`` (optimistic concurrency: of two standbys racing, one gets 409).
  ``leaseTransitions`` goes up by one at each new holder: that is the epoch.
- Held by us: renew every ``renew_s`` with an update carrying our last ``resourceVersion``;
  a 409 or another holder means we were deposed. The resourceVersion of our last good
  renewal is the fencing token shown in status (``fencing_token``).
- :meth:`fence` answers None once our last good renewal is ``lease_s / 2`` old, so a leader cut
  off from the API server stops acting well before a standby may take over (after
  ``lease_s``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from minutiae.clock import Clock
from minutiae.controller.leadership import LeaderStatus, Role
from minutiae.errors import BackendError, MinutiaeError
from minutiae.schedulers.kubernetes.http import KubeAPIError, KubeClient

__all__ = ["KubeLeaseLeadership"]


def _micro(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeLeaseLeadership:
    mechanism = "lease"

    def __init__(self, client: KubeClient, identity: str, clock: Clock, *,
                 namespace: str = "default", name: str = "minutiae-controller",
                 lease_s: float = 6.0, renew_s: float = 1.0,
                 on_won: Callable[[int, str, float], None] | None = None) -> None:
        self.client = client
        #: told (epoch, identity, since) on each takeover, before we act: ``PgStore.set_epoch``
        #: so the store's fenced inserts refuse the previous holder
        self.on_won = on_won
        self.identity = identity
        self.clock = clock
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.coll = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.lease_s = lease_s
        self.renew_s = renew_s
        self._mu = threading.Lock()
        self._lease: dict[str, Any] | None = None     # the last Lease we saw
        self._seen_rv: str | None = None
        self._seen_at = 0.0                           # monotonic time it last changed
        self._epoch: int | None = None
        self._good = float("-inf")
        self._since: float | None = None
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- protocol ------------------------------------------------------------------------
    def acquire(self) -> bool:
        with self._mu:
            t0 = time.monotonic()
            try:
                self._try(t0)
                self._error = None
            except BackendError as exc:   # unreachable, refused: not the leader
                self._error = str(exc)
                if self._epoch is not None and t0 - self._good >= self.lease_s / 2:
                    self._epoch = None
            return self.fence() is not None

    def fence(self) -> int | None:
        if self._epoch is None or time.monotonic() - self._good >= self.lease_s / 2:
            return None
        return self._epoch

    def status(self) -> LeaderStatus:
        spec = (self._lease or {}).get("spec", {})
        holder = spec.get("holderIdentity") or None
        epoch = int(spec.get("leaseTransitions", 0)) + 1 if self._lease else None
        if self.fence() is not None:
            return LeaderStatus(Role.LEADER, self._epoch, self.identity, self.mechanism, None,
                                self._since)
        why = (f"Lease {self.name} held by {holder} (epoch {epoch}, resourceVersion "
               f"{self._seen_rv})" if holder else f"Lease {self.name}: no holder")
        if self._error:
            why += f"; last try: {self._error}"
        return LeaderStatus(Role.STANDBY, epoch, holder, self.mechanism,
                            f"{why}: not acting, serving reads and taking reports")

    @property
    def fencing_token(self) -> str | None:
        """The resourceVersion of our last good renewal (None when not leading)."""
        return self._seen_rv if self.fence() is not None else None

    # ---- the renewal thread --------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="minutiae-lease",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.acquire()
            self._stop.wait(self.renew_s)

    def release(self) -> None:
        """Stop renewing and hand the Lease back (holder cleared) so a standby takes it now."""
        self._stop.set()
        with self._mu:
            if self._epoch is not None and self._lease is not None:
                body = dict(self._lease)
                body["spec"] = {**body["spec"], "holderIdentity": None}
                with contextlib.suppress(BackendError):
                    self.client.request("PUT", self.path, json=body)
            self._epoch = None

    # ---- ours ----------------------------------------------------------------------------
    def _try(self, t0: float) -> None:
        try:
            cur: dict[str, Any] | None = self.client.get(self.path)
        except KubeAPIError as exc:
            if exc.status != 404:
                raise
            cur = None
        if cur is None:
            self._create(t0)
            return
        self._observe(cur, t0)
        spec = cur.get("spec", {})
        holder = spec.get("holderIdentity")
        if holder == self.identity and self._epoch is not None:
            self._update(cur, t0, transitions=int(spec.get("leaseTransitions", 0)))
        elif not holder or t0 - self._seen_at >= self.lease_s:
            self._epoch = None
            self._update(cur, t0, transitions=int(spec.get("leaseTransitions", 0)) + 1,
                         take=True)
        else:
            self._epoch = None   # someone else renews it

    def _observe(self, lease: dict[str, Any], t0: float) -> None:
        rv = lease.get("metadata", {}).get("resourceVersion")
        if rv != self._seen_rv:
            self._seen_rv, self._seen_at = rv, t0
        self._lease = lease

    def _create(self, t0: float) -> None:
        now = self.clock.now()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name},
                "spec": {"holderIdentity": self.identity,
                         "leaseDurationSeconds": max(1, int(self.lease_s)),
                         "acquireTime": _micro(now), "renewTime": _micro(now),
                         "leaseTransitions": 0}}
        try:
            got = self.client.post(self.coll, body)
        except KubeAPIError as exc:
            if exc.status == 409:   # another standby created it first
                return
            raise
        self._won(got, t0, now)

    def _update(self, cur: dict[str, Any], t0: float, *, transitions: int,
                take: bool = False) -> None:
        now = self.clock.now()
        spec = dict(cur.get("spec", {}))
        spec.update({"holderIdentity": self.identity, "renewTime": _micro(now),
                     "leaseDurationSeconds": max(1, int(self.lease_s)),
                     "leaseTransitions": transitions})
        if take:
            spec["acquireTime"] = _micro(now)
        body = {**cur, "spec": spec}   # carries metadata.resourceVersion: 409 if it moved
        try:
            got = self.client.request("PUT", self.path, json=body)
        except KubeAPIError as exc:
            if exc.status == 409:
                self._epoch = None
                self._error = "deposed: the Lease changed under us (409)"
                return
            raise
        if take:
            self._won(got, t0, now)
        else:
            self._observe(got, t0)
            self._good = t0

    def _won(self, got: dict[str, Any], t0: float, now: float) -> None:
        self._observe(got, t0)
        epoch = int(got.get("spec", {}).get("leaseTransitions", 0)) + 1
        if self.on_won is not None:
            try:
                self.on_won(epoch, self.identity, now)
            except MinutiaeError as exc:   # store unreachable: leader of nothing, don't act
                self._error = f"won the Lease but cannot record epoch {epoch}: {exc}"
                return
        self._epoch = epoch
        self._good, self._since = t0, now
