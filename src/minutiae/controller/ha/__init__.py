"""High availability: leader election for several ``minutiae serve`` replicas (same protocol
as ``minutiae.controller.leadership``). ``pg_lock``: PostgreSQL advisory lock + epoch table;
``k8s_lease``: a ``coordination.k8s.io/v1`` Lease (resourceVersion as the fencing token)."""

from __future__ import annotations

__all__: list[str] = []
