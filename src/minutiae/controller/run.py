"""Wiring for ``minutiae serve``: store + policy + backend + controller + uvicorn."""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import replace
from typing import Any

from minutiae.clock import SystemClock
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.errors import ConfigError
from minutiae.schedulers import make_backend

#: seconds a client has to send a request's whole header block (from connect, or from the end
#: of the previous response on a kept-alive connection); MINUTIAE_HEADER_TIMEOUT_S overrides
HEADER_TIMEOUT_S = 10.0
#: bytes of request line + headers before the connection is dropped
MAX_HEADER_BYTES = 64 * 1024
#: seconds an idle kept-alive connection is held
KEEP_ALIVE_S = 5
#: open connections at most (uvicorn answers 503 past it), and file descriptors kept for the
#: store, logs and the scheduler whatever RLIMIT_NOFILE is
MAX_CONNECTIONS = 4096
_FD_RESERVE = 64


def connection_cap(nofile: int | None = None) -> int:
    """``MAX_CONNECTIONS``, or fewer so that connections never take the descriptors the store
    and the scheduler calls need (with ``ulimit -n 256``: 192)."""
    if nofile is None:
        import resource

        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(8, min(MAX_CONNECTIONS, nofile - _FD_RESERVE))


def guarded_protocol(header_timeout: float, max_header: int = MAX_HEADER_BYTES) -> Any:
    """uvicorn's httptools protocol with the ingest hot path answered in its callbacks
    (``minutiae.controller.http.hotconn``), a header-read deadline and a header size cap: a
    half-open or slowloris connection is closed after ``header_timeout`` seconds instead of
    holding a file descriptor forever (uvicorn arms no timer before the first request)."""
    from minutiae.controller.http.hotconn import HotProtocol

    class Guarded(HotProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _pending = 0

        def _arm(self) -> None:
            self._pending = 0
            self._deadline = self.loop.call_later(header_timeout, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            armed = self._deadline is not None
            super().data_received(data)
            # only a header block still unfinished after this chunk counts: a request whose
            # headers and a large body arrive in one read (one sendall) is answered, not dropped
            if armed and self._deadline is not None and not self.transport.is_closing():
                self._pending += len(data)
                if self._pending > max_header:
                    self._disarm()
                    self.transport.close()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self.pipeline and self._deadline is None:
                self._arm()

    return Guarded


def header_timeout(text: str | None) -> float:
    """``$MINUTIAE_HEADER_TIMEOUT_S`` (unset: ``HEADER_TIMEOUT_S``): seconds in (0, 3600], else
    ConfigError (``float()`` of a bad value was a ValueError traceback out of serve)."""
    if text is None:
        return HEADER_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 3600:   # NaN fails too
        raise ConfigError(f"MINUTIAE_HEADER_TIMEOUT_S: expected seconds in (0, 3600], "
                          f"got {text[:40]!r}")
    return value


def http_limits() -> dict[str, Any]:
    """The uvicorn settings that bound what clients can hold: header deadline and size (the
    protocol above), idle keep-alive, a connection cap."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        http: Any = "h11"
    else:
        http = guarded_protocol(header_timeout(os.environ.get("MINUTIAE_HEADER_TIMEOUT_S")))
    return {"http": http, "timeout_keep_alive": KEEP_ALIVE_S,
            "limit_concurrency": connection_cap(),
            "h11_max_incomplete_event_size": MAX_HEADER_BYTES}


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--listen: expected HOST:PORT, got {listen!r}")
    return host, int(port)


def serve(*, listen: str, db: str, policy_path: str | None, backend: str,
          slurm_conf: str | None, kubeconfig: str | None, act: bool | None, interval: float,
          token: str, cluster: str = "default", controller_id: str = "controller",
          read_token: str | None = None, agent_tokens: str | None = None) -> None:
    import uvicorn

    from minutiae.controller.http.api import make_app

    host, port = parse_listen(listen)
    if len(token) < 16:
        raise ConfigError("token: use at least 16 characters")
    policy = load_policy(policy_path)
    if act is not None:
        policy = replace(policy, dry_run=not act)
    clock = SystemClock()
    import socket
    import sys

    from minutiae.controller.ha.wiring import open_replica, state_dir, wake_on_peers
    from minutiae.schedulers.base import controller_owner

    owner = controller_owner(cluster, controller_id)  # written into every drain we make

    # MINUTIAE_K8S_EVICT=1: also evict a drained node's pods (PodDisruptionBudgets honoured)
    be = make_backend(backend, clock=clock, slurm_conf=slurm_conf, kubeconfig=kubeconfig,
                      evict=os.environ.get("MINUTIAE_K8S_EVICT") == "1", owner=owner)
    if backend == "dry-run":
        policy = replace(policy, dry_run=True)

    from minutiae.controller.notify import notifiers_from_env

    # MINUTIAE_SLACK_WEBHOOK / MINUTIAE_WEBHOOK_URL (+ _SECRET): decisions to Slack / a webhook
    notifiers = notifiers_from_env(os.environ, clock, scheduler=be.name, dry_run=policy.dry_run,
                                   outbox_dir=state_dir(db))
    from minutiae.controller.record import ReportRecorder

    # MINUTIAE_RECORD=DIR: keep DIR/reports.jsonl for `minutiae backtest DIR`
    record = os.environ.get("MINUTIAE_RECORD")
    # one actor per SQLite file: a second `serve` on it is a standby (reads and reports only)
    # PostgreSQL (--store postgresql://…): replicas share it, one leads (controller/ha/)
    # MINUTIAE_LEASE=NAMESPACE/NAME: elect by a Kubernetes Lease instead (PostgreSQL store)
    store, lead = open_replica(db, f"{owner}@{socket.gethostname()}:{os.getpid()}", clock,
                               lease=os.environ.get("MINUTIAE_LEASE"), kubeconfig=kubeconfig)
    from minutiae.controller.decisionlog import JsonLog

    # one JSON line per decision and per problem on stderr (MINUTIAE_LOG_JSON=0: off)
    log = None if os.environ.get("MINUTIAE_LOG_JSON") == "0" else JsonLog(
        sys.stderr, owner, clock, dry_run=policy.dry_run)
    controller = Controller(store, be, policy, clock,
                            notifiers=[*([log] if log else []), *notifiers],
                            recorder=ReportRecorder(record) if record else None,
                            owner=owner, leadership=lead)
    wake_on_peers(store, controller.wake.set)   # PostgreSQL: a standby's report wakes us
    if log is not None:
        controller.on_problem.append(log.problem)
    if not lead.acquire():
        print(f"minutiae serve: STANDBY: {lead.status().detail}", flush=True)
    if read_token is not None and (len(read_token) < 16 or read_token == token):
        raise ConfigError("read token: use at least 16 characters, not the admin token")
    from minutiae.controller.http.agent_tokens import AgentTokens

    app = make_app(controller, token, loop_interval=interval, read_token=read_token,
                   agent_tokens=AgentTokens(agent_tokens) if agent_tokens else None)
    if read_token is None:
        print("minutiae serve: WARNING: nodes/explain/audit (evidence) are readable without a "
              "token; set --read-token-file or MINUTIAE_READ_TOKEN", flush=True)
    mode = "DRY-RUN (nothing reaches the scheduler)" if controller.dry_run else "ACTING"
    print(f"minutiae serve: {mode}; identity {owner}; backend {be.name}; policy "
          f"{policy.source}; store {db}; http://{host}:{port}", flush=True)
    # the reconcile thread hands the GIL back to the event loop every 1 ms (default 5 ms), so
    # a step over 20,000 nodes delays reports by a millisecond or so, not by 5 ms slices
    sys.setswitchinterval(0.001)
    # httptools + uvloop when installed (they are dependencies), no access log, no proxy-header
    # rewriting (client addresses are not used), no Server header; bounded connections
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                proxy_headers=False, server_header=False, loop="auto", **http_limits())
