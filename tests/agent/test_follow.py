"""The kernel-log follower: new lines through the real parser and rules, a drain-worthy XID wakes
the loop at once (one push per burst), a flood is capped and counted, the interval schedule is
unchanged. The XID 79 line is the one NVIDIA documents (Xid Errors, "GPU has fallen off the
bus"), as in tests/e2e/test_e2e_slurm.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from minutiae.agent.follow import KernelLogFollower
from minutiae.agent.runner import Agent, AgentConfig
from minutiae.model import CheckResult
from minutiae.node.sources.kernel_log.read_stream import KernelLogTail

XID79 = (b"[ 2034.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
         b"GPU has fallen off the bus.\n")
BENIGN = b"[ 2035.000001] usb 1-1: new high-speed USB device number 3 using xhci_hcd\n"


def _append(p: Path, data: bytes) -> None:
    with open(p, "ab") as fh:
        fh.write(data)


def test_follows_from_the_end_and_wakes_only_on_a_finding(tmp_path):
    log = tmp_path / "kern.log"
    log.write_bytes(XID79)  # already there at start: the interval check's job, not a wake
    wake = threading.Event()
    f = KernelLogFollower(log, wake)
    assert f.step() is False and not wake.is_set()
    _append(log, BENIGN)
    assert f.step() is False and not wake.is_set()
    _append(log, XID79)
    assert f.step() is True and wake.is_set() and f.triggers == 1
    assert f.lines == 2


def test_partial_line_waits_for_its_end(tmp_path):
    log = tmp_path / "kern.log"
    log.write_bytes(b"")
    wake = threading.Event()
    f = KernelLogFollower(log, wake)
    _append(log, XID79[:30])
    assert f.step() is False
    _append(log, XID79[30:])
    assert f.step() is True


def test_rotation_is_followed_from_the_new_start(tmp_path):
    log = tmp_path / "kern.log"
    log.write_bytes(BENIGN * 100)
    wake = threading.Event()
    f = KernelLogFollower(log, wake)
    log.unlink()
    log.write_bytes(XID79)  # a new file (new inode), shorter than the old offset
    assert f.step() is True


def test_flood_is_capped_and_counted(tmp_path):
    log = tmp_path / "kern.log"
    log.write_bytes(b"")
    tail = KernelLogTail(log)
    _append(log, BENIGN * 10_000)  # ~760 kB in one poll interval
    got = tail.poll(max_bytes=1 << 16)
    assert len(got) <= (1 << 16) + 1
    assert tail.skipped_bytes == len(BENIGN) * 10_000 - (1 << 16)
    _append(log, XID79)  # the next line after the flood is still seen
    assert XID79 in tail.poll()


class _Report:
    def __init__(self, n: int) -> None:
        self.n = n

    def to_json(self):
        return CheckResult("kernel_log", 0, (), None, self.n).to_json() | {"status": "ok"}


def test_wake_runs_a_cycle_at_once_and_keeps_the_interval(tmp_path):
    """Real clock: interval 5 s; a burst of three XID lines 0.3 s in → one extra cycle within
    the debounce, not three, and not waiting for the interval."""
    from minutiae.clock import SystemClock

    log = tmp_path / "kern.log"
    log.write_bytes(b"")
    wake = threading.Event()
    calls: list[float] = []

    def check():
        calls.append(time.monotonic())
        return _Report(len(calls))

    agent = Agent(AgentConfig("n1", interval_s=5.0, debounce_s=0.1), check, SystemClock(),
                  log=lambda s: None)
    f = KernelLogFollower(log, wake, poll_s=0.02).start()
    t = threading.Thread(target=agent.run, kwargs={"cycles": 2, "wake": wake})
    t0 = time.monotonic()
    t.start()
    time.sleep(0.3)
    for _ in range(3):
        _append(log, XID79)
    t.join(timeout=4)
    f.stop()
    assert not t.is_alive(), "the woken cycle did not run"
    assert len(calls) == 2
    assert calls[1] - t0 < 1.0  # woken, not the 5 s interval
    assert agent.metrics.follow_wakes._value.get() == 1
