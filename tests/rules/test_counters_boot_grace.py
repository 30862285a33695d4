"""Boot grace of the IB port-state rule (counters.toml ib.port-down: unless node.uptime_s < 300):
a booting node's ports go DOWN → INIT → ACTIVE and must not alarm; a port still down after
the grace does. Checked on the real H100 sysfs snapshot, in the backtest's change-log replay
and in the simulator's eval."""

from __future__ import annotations

from pathlib import Path

from minutiae.node.replay import ib_signals
from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import boot_grace_s, context, evaluate
from minutiae.testing.sysfs import ib_tree

NOW = 1_700_000_000.0
SNAPSHOT = "infiniband/gpud/sys-class-infiniband-h100.0"


def _port_down(realdata: Path, tmp_path: Path, state: str, uptime: float | None) -> list[str]:
    root = ib_tree(tmp_path, realdata / SNAPSHOT)
    port = root / "class/infiniband/mlx5_7/ports/1"
    (port / "state").write_text(state)
    (port / "phys_state").write_text("2: Polling" if "DOWN" in state else "5: LinkUp")
    snap = read_sysfs_ib(root)
    extra = {"node": {"uptime_s": uptime}} if uptime is not None else None
    found = evaluate(counter_rules(), context(snap.observations, {}, NOW, extra))
    return sorted(f.component or "" for f in found if f.kind == "ib_port_down")


def test_port_down_one_minute_after_boot_does_not_alarm(realdata: Path, tmp_path: Path) -> None:
    assert _port_down(realdata, tmp_path, "1: DOWN", 60.0) == []
    assert _port_down(realdata, tmp_path, "2: INIT", 200.0) == []


def test_port_down_twenty_minutes_after_boot_alarms(realdata: Path, tmp_path: Path) -> None:
    assert _port_down(realdata, tmp_path, "1: DOWN", 1200.0) == ["ib:mlx5_7/1"]
    assert _port_down(realdata, tmp_path, "2: INIT", 300.0) == ["ib:mlx5_7/1"]


def test_unknown_uptime_is_not_a_grace(realdata: Path, tmp_path: Path) -> None:
    # `minutiae check` without an uptime: the rule judges as it always did
    assert _port_down(realdata, tmp_path, "1: DOWN", None) == ["ib:mlx5_7/1"]


def test_only_the_port_state_rule_has_a_boot_grace() -> None:
    graces = {r.id: boot_grace_s(r) for r in counter_rules() if boot_grace_s(r) > 0}
    # ib.port-count-expected counts ACTIVE ports (--expected-ib-ports): the same grace
    assert graces == {"ib.port-down": 300.0, "ib.frontend-port-down": 300.0,
                      "ib.port-count-expected": 300.0}


def _rows(t0: float, ports: tuple[str, ...]) -> list[str]:
    out = []
    for p in ports:
        out += [f"{t0:.0f},{p},1,state,4: ACTIVE", f"{t0:.0f},{p},1,phys_state,5: LinkUp",
                f"{t0:.0f},{p},1,rate,400 Gb/sec (4X NDR)", f"{t0:.0f},{p},1,symbol_error,0"]
    return out


def test_backtest_replay_sees_the_grace_and_judges_again_when_it_ends() -> None:
    boot = NOW + 3600
    rows = _rows(NOW, ("mlx5_0", "mlx5_1"))
    # the node boots: both ports train (DOWN at +60 s, INIT at +120 s); mlx5_0 comes up at
    # +240 s, mlx5_1 never does — its last row says DOWN, and the next sample (+600 s, a
    # symbol error on mlx5_0) is the first after the grace
    rows += [f"{boot + 60:.0f},mlx5_0,1,state,1: DOWN", f"{boot + 60:.0f},mlx5_1,1,state,1: DOWN",
             f"{boot + 120:.0f},mlx5_0,1,state,2: INIT", f"{boot + 240:.0f},mlx5_0,1,state,4: ACTIVE",
             f"{boot + 600:.0f},mlx5_0,1,symbol_error,1"]
    got = ib_signals("time,device,port,counter,value\n" + "\n".join(rows), "ib.csv", "gpu001", [boot])
    down = [(round(t - boot), f.component) for t, fs in got for f in fs if f.kind == "ib_port_down"]
    # the grace ends at +300 s; the port must then stay down 120 s (ib.port-down's for_s): the
    # agent alarms at +420 s, the replay at its first check after that, and before the next
    # sample (+600 s)
    assert 420 <= down[0][0] <= 600 and down[0][1] == "ib:mlx5_1/1"
    assert all(t >= 420 and c == "ib:mlx5_1/1" for t, c in down)
    # without the boot times the replay alarms on both ports once they stayed out of ACTIVE
    # for 120 s (mlx5_0 is INIT then, not yet ACTIVE)
    got = ib_signals("time,device,port,counter,value\n" + "\n".join(rows), "ib.csv", "gpu001")
    first = {f.component for t, fs in got if t == boot + 181 for f in fs if f.kind == "ib_port_down"}
    assert first == {"ib:mlx5_0/1", "ib:mlx5_1/1"}
    assert not any(f.kind == "ib_port_down" for t, fs in got if t < boot + 181 for f in fs)
