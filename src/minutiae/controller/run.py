"""Wiring for ``minutiae serve``: store + policy + backend + controller + uvicorn."""

from __future__ import annotations

from dataclasses import replace

from minutiae.clock import SystemClock
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.errors import ConfigError
from minutiae.schedulers import make_backend


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
    import os
    import socket
    import sys

    from minutiae.controller.ha.wiring import open_replica, state_dir
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
    # rewriting (client addresses are not used), no Server header
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                proxy_headers=False, server_header=False, http="auto", loop="auto")
