"""``minutiae serve``'s store and leadership from ``--store`` (alias ``--db``): a SQLite file
(one actor per file: ``SqliteFileLock``) or ``postgresql://…`` (replicas share it; leader by
advisory lock + epoch, renewed in a thread of its own). On Kubernetes, ``MINUTIAE_LEASE=
NAMESPACE/NAME`` with a PostgreSQL store elects by that Lease instead (``--kubeconfig``, else
in-cluster); each takeover's epoch is written into the store, which fences the inserts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from minutiae.clock import Clock
from minutiae.controller.leadership import Leadership, SqliteFileLock
from minutiae.controller.store import ControllerStore, Store, is_postgres
from minutiae.errors import ConfigError

if TYPE_CHECKING:
    from minutiae.controller.ha.k8s_lease import KubeLeaseLeadership
    from minutiae.controller.store.postgres import PgStore

__all__ = ["open_replica", "state_dir", "wake_on_peers"]


def open_replica(where: str, identity: str, clock: Clock, *, pool: int = 4,
                 lease: str | None = None, kubeconfig: str | None = None
                 ) -> tuple[ControllerStore, Leadership]:
    """The store and the leadership for ``where``; ``identity`` names this replica."""
    if is_postgres(where):
        from minutiae.controller.ha.pg_lock import PgAdvisoryLeadership
        from minutiae.controller.store.postgres import PgStore

        store = PgStore(where, identity=identity, size=pool)
        lead: PgAdvisoryLeadership | KubeLeaseLeadership = (
            PgAdvisoryLeadership(store, identity, clock) if not lease else
            _lease(lease, kubeconfig, identity, clock, store))
        lead.start()
        return store, lead
    if lease:
        raise ConfigError("MINUTIAE_LEASE needs a PostgreSQL store (--store postgresql://…): "
                          "replicas must share the store the epoch fences")
    return Store(where), SqliteFileLock(where, identity, clock)


def state_dir(where: str) -> Path:
    """Where files beside the store go (notifier outboxes): the SQLite file's folder, or the
    working directory for a PostgreSQL store."""
    return Path.cwd() if is_postgres(where) else Path(where).resolve().parent


def _lease(spec: str, kubeconfig: str | None, identity: str, clock: Clock, store: PgStore
           ) -> KubeLeaseLeadership:
    from minutiae.controller.ha.k8s_lease import KubeLeaseLeadership
    from minutiae.schedulers.kubernetes.config import load_in_cluster, load_kubeconfig
    from minutiae.schedulers.kubernetes.http import KubeClient

    ns, _, name = spec.partition("/")
    if not ns or not name:
        raise ConfigError(f"MINUTIAE_LEASE: expected NAMESPACE/NAME, got {spec!r}")
    cfg = load_kubeconfig(kubeconfig) if kubeconfig else load_in_cluster()
    return KubeLeaseLeadership(KubeClient(cfg), identity, clock, namespace=ns, name=name,
                               on_won=store.set_epoch)


def wake_on_peers(store: ControllerStore, wake: Callable[[], None]) -> None:
    """PostgreSQL: ``wake`` (the reconcile loop) when another replica stored a report that
    changes a node, so the leader acts on what a standby took at once."""
    from minutiae.controller.store.postgres import PgStore

    if isinstance(store, PgStore):
        store.listen(wake)
