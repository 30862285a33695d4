"""Helpers for the Prometheus / Grafana / Alertmanager e2e tests: PromQL over HTTP, the metric
names a query reads, the recording rules expanded in place, a real agent and controller, the
shared file_sd targets file, and a private Prometheus with our rules."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from minutiae.testing.serve import free_port

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "rules"
METRICS_MD = ROOT / "deploy" / "prometheus" / "METRICS.md"
GRAFANA = ROOT / "deploy" / "grafana"
RECORDED = re.compile(r"minutiae:[a-z0-9_:]+")
# a metric name in a selector (ours, or Prometheus's own `up`), not a function call
SELECTOR = re.compile(r"(?<![\w:.\"-])(minutiae_[a-z0-9_]+|up)(?![\w:(])(\{[^}]*\})?")


def need(var: str, what: str) -> str:
    """A service's address from the environment: skip without it, fail under ``make test``."""
    value = os.environ.get(var)
    if value:
        return value
    msg = f"{what} not running: {var} unset (start it with `make services`)"
    if os.environ.get("MINUTIAE_REQUIRE_SERVICES") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def need_binary(name: str) -> str:
    for candidate in (name, f"prometheus-{name}"):
        with contextlib.suppress(FileNotFoundError):
            subprocess.run([candidate, "--version"], capture_output=True, check=True)  # noqa: S603
            return candidate
    msg = f"{name} is not installed (scripts/services/install.sh installs it)"
    if os.environ.get("MINUTIAE_REQUIRE_SERVICES") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def query(prom: str, q: str) -> list[dict[str, Any]]:
    """An instant query's result; a query Prometheus cannot parse fails with its error."""
    r = httpx.get(f"{prom}/api/v1/query", params={"query": q}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (q, body.get("error"))
    return list(body["data"]["result"])


def recording_rules() -> dict[str, str]:
    out = {}
    for g in yaml.safe_load((RULES / "records.yaml").read_text())["groups"]:
        for rule in g["rules"]:
            out[rule["record"]] = " ".join(rule["expr"].split())
    return out


def expand(q: str, records: dict[str, str]) -> str:
    """``q`` with every recorded series replaced by its rule's expression (the shared Prometheus
    does not load our rules). A recorded series used with matchers cannot be expanded."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(0)
        assert name in records, f"{name}: no such recording rule in records.yaml"
        assert not q[m.end():].startswith("{"), f"{q}: matchers on a recorded series"
        return f"({records[name]})"
    return RECORDED.sub(sub, q)


def names(q: str) -> set[str]:
    """The metric names a (fully expanded) query reads."""
    return {m.group(1) for m in SELECTOR.finditer(q)}


def scoped(q: str, instances: list[str]) -> str:
    """``q`` reading only our targets' series: every selector gets an ``instance`` matcher, so
    series left by other tests in the shared Prometheus cannot make a panel pass."""
    alt = "|".join(re.escape(i) for i in instances).replace("\\", "\\\\")
    matcher = f'instance=~"{alt}"'

    def sub(m: re.Match[str]) -> str:
        inner = (m.group(2) or "{}")[1:-1].strip()
        return f"{m.group(1)}{{{matcher}{', ' + inner if inner else ''}}}"
    return SELECTOR.sub(sub, q)


def exported(url: str) -> set[str]:
    """Sample names a /metrics endpoint serves now (``_total``, ``_bucket`` … included)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def agent(node: str, xml: Path, workdir: Path, controller: str | None = None,
          token: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``minutiae agent`` reading an nvidia-smi capture, pushing to ``controller``."""
    port = free_port()
    argv = [sys.executable, "-m", "minutiae.cli.main", "agent", "--node", node,
            "--nvidia-smi-xml", str(xml), "--no-nvml", "--checks", "gpu,ib",
            "--sysfs-root", str(workdir / "nosys"), "--state-dir", str(workdir / f"state-{node}"),
            "--metrics-listen", f"127.0.0.1:{port}", "--interval", "1"]
    if controller:
        argv += ["--controller", controller]
    env = {**os.environ, **({"MINUTIAE_TOKEN": token} if token else {})}
    log = open(workdir / f"agent-{node}.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)  # noqa: S603
    return proc, f"127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def shared_targets(path: str, groups: list[dict[str, Any]]) -> Iterator[Any]:
    """Add ``groups`` to the shared file_sd targets file, keeping what is there; ``ensure()``
    puts them back if another test rewrote the file; they are removed on exit."""
    p = Path(path)
    lock = p.with_name(p.name + ".lock")

    def edit(add: bool) -> None:
        with open(lock, "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                cur = json.loads(p.read_text()) if p.exists() else []
            except ValueError:
                cur = []
            cur = [g for g in cur if g not in groups]
            tmp = p.with_name(p.name + f".{os.getpid()}.tmp")   # Prometheus never reads half a file
            tmp.write_text(json.dumps(cur + groups if add else cur))
            os.replace(tmp, p)

    def ensure() -> None:
        try:
            cur = json.loads(p.read_text()) if p.exists() else []
        except ValueError:          # another test is writing it
            cur = []
        if any(g not in cur for g in groups):
            edit(True)

    edit(True)
    try:
        yield ensure
    finally:
        edit(False)


def wait_for(what: str, probe: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


class PrivatePrometheus:
    """A Prometheus of our own (free port, temp dir) with our rule files, evaluating every
    second and sending alerts to ``alertmanager``; the shared one is never reconfigured."""

    def __init__(self, workdir: Path, scrape: dict[str, list[str]], alertmanager: str) -> None:
        self.dir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        am = alertmanager.removeprefix("http://").rstrip("/")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES / "*.yaml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am]}]}]},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in scrape.items()]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrivatePrometheus:
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(  # noqa: S603
            ["prometheus", f"--config.file={self.dir / 'prometheus.yml'}",  # noqa: S607
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, (
                (self.dir / "prometheus.log").read_text()[-2000:])
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
            return False
        wait_for("our Prometheus to be ready", ready, 30, 0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc)
