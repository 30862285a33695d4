"""Kubernetes Lease leadership on the real kube-apiserver (MINUTIAE_KUBECONFIG): one holder, a
standby that names it, renewals that move the resourceVersion (the fencing token), takeover
after the holder stops renewing (a partition) within 15 s with the next epoch, the old holder
deposed (its update carrying a stale resourceVersion is refused: 409) and a release handed
over at once."""

from __future__ import annotations

import time
import uuid

import pytest

from minutiae.clock import SystemClock
from minutiae.controller.ha.k8s_lease import KubeLeaseLeadership
from minutiae.schedulers.kubernetes.config import load_kubeconfig
from minutiae.schedulers.kubernetes.http import KubeClient

pytestmark = pytest.mark.k8s


def test_lease_holder_standby_takeover_and_fencing(kubeconfig: str) -> None:
    client = KubeClient(load_kubeconfig(kubeconfig))
    name = "minutiae-test-" + uuid.uuid4().hex[:8]
    clock = SystemClock()
    a = KubeLeaseLeadership(client, "ctl-a", clock, name=name, lease_s=2.0)
    b = KubeLeaseLeadership(client, "ctl-b", clock, name=name, lease_s=2.0)
    try:
        assert a.acquire() and a.fence() == 1
        assert not b.acquire() and b.fence() is None
        st = b.status()
        assert st.role.value == "standby" and st.leader == "ctl-a" and st.epoch == 1
        rv1 = a.fencing_token
        assert a.acquire() and a.fencing_token not in (None, rv1)   # a renewal moves it
        stale = a._lease
        # a stops renewing (cut off); b keeps trying
        t0 = time.monotonic()
        while not b.acquire():
            assert time.monotonic() - t0 < 15.0, "no takeover within 15 s"
            time.sleep(0.2)
        took = time.monotonic() - t0
        assert b.fence() == 2 and 1.5 <= took <= 15.0, took
        assert a.fence() is None                   # a's own clock already said stop
        assert not a.acquire() and a.status().leader == "ctl-b"
        assert stale is not None
        a._epoch, a._good = 1, time.monotonic()    # as if a still believed it led ...
        a._update(stale, time.monotonic(), transitions=0)
        assert a.fence() is None and a._error and "409" in a._error  # ... refused
        got = client.get(f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
        assert got["spec"]["holderIdentity"] == "ctl-b" and got["spec"]["leaseTransitions"] == 1
        b.release()
        assert a.acquire() and a.fence() == 3      # handed over at once, next epoch
    finally:
        client.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}",
                       ok=(200, 202, 404))


def test_lease_epoch_fences_the_postgres_store(kubeconfig: str) -> None:
    """Lease + PostgreSQL store: each takeover writes its epoch into the store, so the old
    holder's audit-before-act insert is refused in its own transaction."""
    from ha_support import fresh_schema_dsn

    from minutiae.controller.state import ControllerMemory
    from minutiae.controller.store.postgres import PgStore
    from minutiae.errors import StoreError

    dsn = fresh_schema_dsn()
    client = KubeClient(load_kubeconfig(kubeconfig))
    name = "minutiae-test-" + uuid.uuid4().hex[:8]
    clock = SystemClock()
    sa, sb = PgStore(dsn, identity="ctl-a", size=1), PgStore(dsn, identity="ctl-b", size=1)
    a = KubeLeaseLeadership(client, "ctl-a", clock, name=name, lease_s=2.0, on_won=sa.set_epoch)
    b = KubeLeaseLeadership(client, "ctl-b", clock, name=name, lease_s=2.0, on_won=sb.set_epoch)
    empty = ControllerMemory()
    try:
        assert a.acquire() and a.fence() == 1
        assert sa.begin_batch(empty, empty, [], False, epoch=a.fence()) == []
        t0 = time.monotonic()
        while not b.acquire():                      # a stops renewing
            assert time.monotonic() - t0 < 15.0
            time.sleep(0.2)
        assert b.fence() == 2
        with pytest.raises(StoreError, match="fenced: epoch 1 is no longer the leader's"):
            sa.begin_batch(empty, empty, [], False, epoch=1)
        assert sb.begin_batch(empty, empty, [], False, epoch=2) == []
    finally:
        client.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}",
                       ok=(200, 202, 404))
