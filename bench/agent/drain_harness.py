"""Kernel line → Slurm drain, end to end on the real slurmctld: a real ``minutiae serve --act
--backend slurm`` and one real ``minutiae agent`` per node (``--kmsg`` a file the harness writes
to, ``--checks kernel_log``); an XID 79 line is appended and the time to ``State=…DRAIN…`` in
``scontrol show node`` is measured. Used by ``bench/agent/latency.py`` and
``tests/e2e/test_kernel_to_drain.py``. Nodes are returned to service after each batch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from minutiae.testing.serve import ServeProcess

TOKEN = "kernel-to-drain-token-0123456789abcdef"
# NVIDIA's XID 79 as the driver logs it (Xid Errors doc, "GPU has fallen off the bus"); the
# same line as tests/e2e/test_e2e_slurm.py's XID79
XID79 = ("[{t:12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")
POLICY = """
dry_run = false
healthy_delay_s = 600
stale_after_s = 600
fleet_nodes = "{fleet}"
[[rule]]
name = "needs-remediation"
min_action = "reset_gpu"
do = "drain"
examples = [{{kind = "xid", code = 79, action = "reboot", expect = "drain"}}]
[[ladder]]
step = "reboot"
timeout_s = 1800
[lemon]
drains = 1000
[budget]
max_unavailable_fraction = 1.0
per_job_max_nodes = 100
[budget.domain_caps]
rack = 100
[budget.rate.drain]
per_minute = 6000
burst = 100
[budget.storm]
fraction = 1.0
window_s = 600
min_nodes = 1000
"""


def scontrol(conf: str, *args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SLURM_CONF": conf}).stdout


def state(conf: str, node: str) -> str:
    m = re.search(r"\bState=(\S+)", scontrol(conf, "show", "node", "-o", node))
    return m.group(1) if m else "?"


def resume(conf: str, nodes: Sequence[str]) -> None:
    for n in nodes:
        st = state(conf, n)
        if "DRAIN" in st or "DOWN" in st:
            scontrol(conf, "update", f"NodeName={n}", "State=RESUME")


class Batch:
    """One controller and one agent per node; ``trial(node)`` measures one kernel line."""

    def __init__(self, tmp: Path, conf: str, nodes: Sequence[str], *, follow: bool,
                 interval_s: float = 10.0) -> None:
        self.tmp, self.conf, self.nodes = tmp, conf, list(nodes)
        self.follow, self.interval_s = follow, interval_s
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = {n: tmp / f"kern-{n}.log" for n in nodes}
        self.ctl: ServeProcess | None = None

    def __enter__(self) -> Batch:
        self.tmp.mkdir(parents=True, exist_ok=True)
        resume(self.conf, self.nodes)
        pol = self.tmp / "policy.toml"
        pol.write_text(POLICY.format(fleet="|".join(self.nodes)))
        self.ctl = ServeProcess(self.tmp / "ctl", TOKEN, "--backend", "slurm", "--slurm-conf",
                                self.conf, "--policy", str(pol), "--act").start()
        tok = self.tmp / "token"
        tok.write_text(TOKEN)
        for n in self.nodes:
            self.logs[n].write_text("[    0.000000] Linux version 6.8.0 (buildd@lcy02-amd64)\n")
            argv = [sys.executable, "-m", "minutiae.cli.main", "agent", "--controller",
                    self.ctl.url, "--token-file", str(tok), "--node", n, "--kmsg",
                    str(self.logs[n]), "--checks", "kernel_log", "--state-dir",
                    str(self.tmp / f"agent-{n}"), "--metrics-listen", "", "--interval",
                    str(self.interval_s), "--follow" if self.follow else "--no-follow"]
            with open(self.tmp / f"agent-{n}.log", "ab") as out:
                self.agents[n] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
        deadline = time.monotonic() + 60
        for n in self.nodes:  # each agent has made its first (healthy) report
            while not (self.tmp / f"agent-{n}" / "agent.json").exists():
                if time.monotonic() > deadline or self.agents[n].poll() is not None:
                    raise RuntimeError(f"agent {n} did not report: "
                                       f"{(self.tmp / f'agent-{n}.log').read_text()[-2000:]}")
                time.sleep(0.1)
        return self

    def trial(self, node: str, timeout_s: float = 30.0) -> float:
        """Seconds from the XID 79 line's write to DRAIN in ``scontrol show node``."""
        if "DRAIN" in state(self.conf, node):
            raise RuntimeError(f"{node} is already drained")
        t0 = time.monotonic()
        with open(self.logs[node], "a") as fh:
            fh.write(XID79.format(t=time.monotonic() % 100000))
        while time.monotonic() - t0 < timeout_s:
            if "DRAIN" in state(self.conf, node):
                return time.monotonic() - t0
            time.sleep(0.01)
        raise RuntimeError(f"{node}: not drained {timeout_s:g} s after the XID line")

    def __exit__(self, *exc: object) -> None:
        for p in self.agents.values():
            p.terminate()
        for p in self.agents.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.ctl is not None:
            self.ctl.stop()
        resume(self.conf, self.nodes)
