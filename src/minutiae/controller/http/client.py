"""A small httpx client for the controller API and the text the fleet commands print."""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx

from minutiae.errors import AuthError, BackendUnavailable, ConfigError, InputError


class Client:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            r = httpx.request(method, self.url + path, json=body, headers=self.headers,
                              timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"controller {self.url} unreachable: {exc}") from None
        except httpx.InvalidURL as exc:   # not an HTTPError: a newline in --controller
            raise ConfigError(f"controller URL {self.url!r}: {exc}") from None
        if r.status_code == 401:
            raise AuthError(f"controller {self.url} refused the token (HTTP 401)")
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text[:200]
            raise InputError(f"HTTP {r.status_code}: {detail}", f"{self.url}{path}")
        try:
            return r.json()
        except ValueError:
            raise InputError("controller answered with something that is not JSON",
                             f"{self.url}{path}") from None

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self._call("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self._call("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self._call("DELETE", path)


def _t(ts: float | None) -> str:
    if ts is None:
        return "never"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_status(s: dict[str, Any]) -> str:
    h = s["health"]
    lines = [
        f"controller: {'DRY-RUN' if s['dry_run'] else 'ACTING'} via {s['scheduler']}; "
        f"policy {s['policy']}",
        f"nodes: {s['nodes']} — {h.get('healthy', 0)} healthy, "
        f"{h.get('unhealthy', 0)} unhealthy, {h.get('unknown', 0)} unknown; "
        f"{s['unavailable']} out of service",
        f"pending actions: {s['pending_actions']}; last step {_t(s['last_step'])}",
    ]
    if s.get("silent"):
        lines.append(f"silent: {s['silent']} in service but not reporting "
                     f"({s.get('never_reported', 0)} never reported); counted as unavailable "
                     "by the safety budget")
    p = s.get("paused")
    if p:
        who = "STORM BREAKER TRIPPED" if p["by"] == "breaker" else "PAUSED"
        lines.append(f"{who} since {_t(p['since'])}: {p['reason']}")
        lines.append("  nothing is being done; `minutiae unpause` when it is safe")
    c = s["counters"]
    lines.append(f"reports {c['reports']} (rejected {c['rejected']}); actions done "
                 f"{c['actions_done']}, failed {c['actions_failed']}; holds {c['holds']}")
    if s["problems"]:
        lines.append("could not do:")
        lines += [f"  {_t(p['time'])} {p['what']}" for p in s["problems"][-10:]]
    return "\n".join(lines)


def format_nodes(rows: list[dict[str, Any]]) -> str:
    head = (f"{'NODE':<16} {'HEALTH':<10} {'SCHED':<9} {'OURS':<4} {'STEP':<9} "
            f"{'REPORT':<8} REASON")
    out = [head]
    for r in rows:
        age = r.get("report_age_s")
        seen = "never" if age is None else f"{age:.0f}s"
        owner = r.get("owner")
        by = "yes" if r["ours"] else ("hcp" if owner == "hcp" else ("min" if owner else "-"))
        would = f"  [dry-run: would be {r['would']}]" if r.get("would") else ""
        out.append(f"{r['node']:<16} {r['health']:<10} {r['sched'] or '?':<9} "
                   f"{by:<4} {r['step'] or '-':<9} "
                   f"{seen + ('!' if r.get('silent') else ''):<8} "
                   f"{r['reason'] or ''}{'  [lemon]' if r['lemon'] else ''}{would}")
    return "\n".join(out)


def format_explain(e: dict[str, Any]) -> str:
    lines = [f"{e['node']}: {e['why']}"]
    last = e.get("last_action")
    if last:
        lines.append(f"  decision: {last['action']} at {_t(last['time'])} by rule {last['rule']}"
                     f" ({last['status']}{', dry-run' if last['dry_run'] else ''})")
        if last.get("step"):
            lines.append(f"  remediation step: {last['step']}")
        lines.append("  evidence:")
        lines += [f"    {x}" for x in last["evidence"]] or ["    (none recorded)"]
        b = last["budget"]
        lines.append(f"  budget: {'allowed' if b['allowed'] else 'held'} ({b['check']}): "
                     f"{b['detail']}")
        lines.append(f"  undo: {e.get('undo') or last['undo']}")
        if e.get("scheduler_undo"):
            lines.append(f"  scheduler undo: {e['scheduler_undo']}")
    hold = e.get("last_hold")
    if hold:
        b = hold["budget"]
        lines.append(f"  held: wanted {hold['wanted']} at {_t(hold['time'])}: {b['check']}: "
                     f"{b['detail']}")
    if e.get("current_evidence") and not last:
        lines.append("  now:")
        lines += [f"    {x}" for x in e["current_evidence"]]
    return "\n".join(lines)


def format_jobs(j: dict[str, Any]) -> str:
    lines = [f"per-job tolerance (nodes a running job may lose at once); policy default "
             f"{j['default']}"]
    sched = j.get("from_scheduler", {})
    api = j.get("tolerance", {})
    for job in sorted(sched.keys() | api.keys()):
        if job in api:
            src = "set through the API" + (f" (scheduler says {sched[job]})" if job in sched
                                           else "")
            lines.append(f"  {job}: {api[job]}  {src}")
        else:
            lines.append(f"  {job}: {sched[job]}  from the job's scheduler metadata")
    if len(lines) == 1:
        lines.append("  (none set: every job gets the default)")
    return "\n".join(lines)
