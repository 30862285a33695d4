"""node/replay: "what the agent would report" over recorded series (a kernel log, an ib.csv
change log), as the backtest and the sim eval use it. Moved from tests/backtest (assertions
unchanged); kernel lines in the `dmesg --time-format iso -x` capture format."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import DataError, ParseError
from minutiae.node.replay import ib_signals, log_series, log_signals

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
BOOT = "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-080) #115-Ubuntu SMP"


def kline(t: float, msg: str, level: str = "err") -> str:
    """A line in the `dmesg --time-format iso -x` style (facility, level, ISO time)."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
    return f"kern  :{level:<5} : {stamp} {msg}"


def ib_rows(t: float, state: str = "4: ACTIVE", ports: Iterable[str] = ("mlx5_0", "mlx5_1"),
            full: bool = True) -> list[str]:
    rows = []
    for dev in ports:
        if full:
            rows += [f"{t:.0f},{dev},1,symbol_error,0", f"{t:.0f},{dev},1,link_downed,0",
                     f"{t:.0f},{dev},1,port_rcv_errors,0",
                     f"{t:.0f},{dev},1,phys_state,5: LinkUp",
                     f"{t:.0f},{dev},1,rate,400 Gb/sec (4X NDR)"]
        rows.append(f"{t:.0f},{dev},1,state,{state}")
    return rows


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=3000))
def test_kernel_log_garbage_never_crashes(data: bytes) -> None:
    findings, boots = log_signals(data + b"\n" + kline(T0, XID79).encode(), 2026)
    assert findings[-1].finding.code == 79 and findings[-1].time == T0


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=2000))
def test_ib_csv_garbage_never_crashes(text: str) -> None:
    with contextlib.suppress(DataError, ParseError):
        ib_signals("time,device,port,counter,value\n" + text, "fuzz/ib.csv")
    with pytest.raises(DataError, match="fuzz/ib.csv: missing column"):
        ib_signals("a,b\n1,2\n", "fuzz/ib.csv")


def test_ib_port_down_and_rate_degraded_from_the_change_log() -> None:
    rows = ib_rows(T0, ports=("mlx5_0", "mlx5_1", "mlx5_2"))
    rows += [f"{T0 + 600:.0f},mlx5_1,1,state,1: DOWN", f"{T0 + 1200:.0f},mlx5_1,1,state,4: ACTIVE",
             f"{T0 + 1800:.0f},mlx5_2,1,rate,200 Gb/sec (4X HDR)",
             f"{T0 + 2400:.0f},mlx5_0,1,symbol_error,5000"]
    got = ib_signals("time,device,port,counter,value\n" + "\n".join(rows), "ib.csv")
    kinds = [(t - T0, sorted((f.kind, f.component) for f in fs)) for t, fs in got]
    assert kinds == [
        (0.0, []),
        # the port is down: ib.port-down alarms once it stayed down 120 s (its for_s), and is
        # judged again every 450 s while alarmed (the gate's keep-alive)
        (600.0, []),
        (721.0, [("ib_port_down", "ib:mlx5_1/1")]),
        (1171.0, [("ib_port_down", "ib:mlx5_1/1")]),
        (1200.0, []),
        # re-checks after the port came back: when its persistence, the flap rule's healthy
        # delay (1800 s) and window (3600 s) can end
        (1321.0, []),
        (1621.0, []),
        (1800.0, [("ib_rate_degraded", "ib:mlx5_2/1")]),
        # 5000 symbol errors in 600 s = 30000/h: the rate rule fires; the slow port stays slow
        (2400.0, [("ib_rate_degraded", "ib:mlx5_2/1"), ("ib_symbol_errors", "ib:mlx5_0/1")]),
        # the next check sees no new symbol errors, so the rate finding ends as it would at the
        # agent's next check
        (2401.0, [("ib_rate_degraded", "ib:mlx5_2/1")]),
        (2460.0, [("ib_rate_degraded", "ib:mlx5_2/1")]),
        (3001.0, [("ib_rate_degraded", "ib:mlx5_2/1")]),
        (4201.0, [("ib_rate_degraded", "ib:mlx5_2/1")]),
        (4801.0, [("ib_rate_degraded", "ib:mlx5_2/1")]),
    ]


def test_ib_port_flapping_goes_through_the_agents_gate() -> None:
    """ib.port-flapping (3 downs within an hour, quiet 30 min before it clears) judged over time
    as the agent's engine does, from a change log with no sample in the quiet stretch."""
    rows = ib_rows(T0, ports=("mlx5_0",))
    for k in (1, 2, 3):
        rows += [f"{T0 + 600 * k:.0f},mlx5_0,1,state,1: DOWN",
                 f"{T0 + 600 * k + 120:.0f},mlx5_0,1,state,4: ACTIVE"]
    got = ib_signals("time,device,port,counter,value\n" + "\n".join(rows), "ib.csv")
    flapping = [t - T0 for t, fs in got if any(f.rule == "ib.port-flapping" for f in fs)]
    # the third down at +1800 s alarms; the first down leaves the hour at +4200 s and the alarm
    # clears 1800 s of quiet later
    assert flapping[0] == 1800.0 and 5400.0 < flapping[-1] < 6002.0
    assert not any(f.rule == "ib.port-flapping" for t, fs in got if t - T0 >= 6002.0 for f in fs)
    f = next(f for _t, fs in got for f in fs if f.rule == "ib.port-flapping")
    assert (f.kind, f.severity.label, f.attrs["count"]) == ("ib_link", "warning", 3)


def test_log_series_places_findings_boots_and_counts_untimed() -> None:
    text = "\n".join([kline(T0, BOOT), kline(T0 + 60, XID79), "[ 611.000001] " + XID79]) + "\n"
    series = log_series(text.encode(), 2026)
    assert series.boots == (T0,) and [tf.time for tf in series.findings] == [T0 + 60]
    assert series.untimed == 1  # a raw dmesg uptime cannot be placed on the wall clock
    assert log_signals(text.encode(), 2026) == (list(series.findings), list(series.boots))
