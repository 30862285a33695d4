"""Helpers of the end-to-end Slurm tests (``test_e2e_slurm.py``): ``scontrol`` against the real
slurmctld of fixture ``slurm_conf``, a node's state and reason as Slurm prints them, polling."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any


def sc(conf: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SLURM_CONF": conf})


def node_state(conf: str, node: str) -> tuple[str, str | None]:
    out = sc(conf, "show", "node", "-o", node).stdout
    state = re.search(r"\bState=(\S+)", out)
    reason = re.search(r" Reason=(.*?)(?: \[[^\]]*\])?(?= Comment=| Extra=|$)", out)
    return (state.group(1) if state else "?"), (reason.group(1).strip() if reason else None)


def drained(conf: str, node: str) -> tuple[str, str | None] | None:
    s = node_state(conf, node)
    return s if "DRAIN" in s[0] else None


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
