"""minutiae backtest: small histories written in the dataset layout (docs/dataset.md) with kernel
lines in the real capture's format, replayed through the real policy and reconcile step."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.backtest.history import load_history
from minutiae.backtest.replay import Replay, replay
from minutiae.backtest.report import diff, render, render_diff, to_json
from minutiae.cli.main import main
from minutiae.controller.policy import load_policy, loads_policy
from minutiae.controller.state import Verb
from minutiae.errors import MinutiaeError, ParseError

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z
HOUR = 3600.0
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
# an application XID (the driver's Xid 13 wording): must never drain on its own
XID13 = ("NVRM: Xid (PCI:0000:38:00): 13, pid=4242, name=python3, Graphics SM Warp Exception "
         "on (GPC 0, TPC 1, SM 0): Out Of Range Address")
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


def write_dataset(root: Path, *, nodes: int = 64, days: float = 1.0,
                  kern: dict[str, list[str]] | None = None, ib: dict[str, list[str]] | None = None,
                  maintenance: list[tuple[float, str]] = (), truth: list[dict[str, Any]] = (),
                  jobs: list[tuple[str, float, float, list[str]]] = ()) -> Path:
    names = [f"gpu{i:03d}" for i in range(1, nodes + 1)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.json").write_text(json.dumps({"nodes": nodes, "gpus_per_node": 8, "start": T0,
                                                "end": T0 + days * 86400, "days": days, "seed": 1,
                                                "profile": "test", "version": "test"}))
    (root / "fleet.csv").write_text("node,rack,leaf,nvl_domain,sku,driver,kernel,firmware,nccl\n" + "".join(
        # failure domains spread round-robin so the domain caps never decide these tests
        f"{n},r{i % 8:02d},leaf{i % 16},nvl{i:03d},H100,550,5.15,fw,2.21\n" for i, n in enumerate(names)))
    for n in names:
        d = root / "nodes" / n
        d.mkdir(parents=True, exist_ok=True)
        (d / "kern.log").write_text("\n".join([kline(T0 - 600, BOOT, "info"), *(kern or {}).get(n, [])]) + "\n")
        (d / "ib.csv").write_text("time,device,port,counter,value\n" + "\n".join(
            ib_rows(T0) + (ib or {}).get(n, [])) + "\n")
    (root / "maintenance.csv").write_text("time,node,what\n" + "".join(
        f"{t:.0f},{n},planned reboot\n" for t, n in maintenance))
    (root / "truth.jsonl").write_text("".join(json.dumps(t) + "\n" for t in truth))
    (root / "jobs.csv").write_text("job_id,start,end,nodes,signature,world_size,ranks_per_node\n" + "".join(
        f"{j},{s:.0f},{e:.0f},{' '.join(ns)},llm,{8 * len(ns)},8\n" for j, s, e, ns in jobs))
    return root


def fault(fid: str, cls: str, node: str, start: float, end: float, drain: bool,
          harmful: bool = True) -> dict[str, Any]:
    return {"id": fid, "class": cls, "node": node, "component": None, "start": start, "end": end,
            "severity": "critical" if drain else "info", "expect_drain": drain,
            "signature": ["kern.log"], "harmful": harmful, "details": {}}


def by_node(r: Replay, node: str) -> list[tuple[str, float]]:
    return [(d.action.value, d.time - T0) for d in r.decisions if d.node == node]


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bt") / "ds"
    return write_dataset(root, kern={
        "gpu017": [kline(T0 + HOUR, XID79), kline(T0 + 4 * HOUR, BOOT, "info")],
        "gpu003": [kline(T0 + 2 * HOUR, XID13, "warn")],
        "gpu020": [kline(T0 + 0.5 * HOUR, XID79)], "gpu021": [kline(T0 + 0.5 * HOUR, XID79)],
    }, ib={"gpu040": ib_rows(T0 + 7280, "1: DOWN", ("mlx5_0",), full=False)
           + ib_rows(T0 + 7880, "4: ACTIVE", ("mlx5_0",), full=False)},
        maintenance=[(T0 + 7200, "gpu040")],
        jobs=[("4242", T0, T0 + 6 * HOUR, ["gpu020", "gpu021", "gpu022"])],
        truth=[fault("f1", "gpu_off_bus", "gpu017", T0 + HOUR, T0 + 4 * HOUR, True),
               fault("f2", "app_xid", "gpu003", T0 + 2 * HOUR, T0 + 2 * HOUR, False, False),
               fault("f3", "planned_reboot", "gpu040", T0 + 7200, T0 + 7500, False, False),
               fault("f4", "gpu_off_bus", "gpu020", T0 + 1800, T0 + 86400, True),
               fault("f5", "gpu_off_bus", "gpu021", T0 + 1800, T0 + 86400, True)])


def test_drain_escalate_and_resume_after_reboot(basic: Path) -> None:
    r = replay(load_history(basic), load_policy())
    # Xid 79 at +1h: drained at once (step 60 s), ladder reboot -> inspect after 1800 s, the
    # boot at +4h clears the kernel-log finding and the node returns after the 600 s healthy delay
    assert by_node(r, "gpu017") == [("drain", 3600.0), ("escalate", 5400.0), ("resume", 15000.0)]
    d = next(d for d in r.decisions if d.node == "gpu017")
    assert d.rule == "needs-remediation" and d.step is not None and d.step.label == "reboot"
    assert d.reason.startswith("minutiae[default/controller]: needs-remediation xid 79")
    assert d.undo == "minutiae resolve gpu017 --now --reason 'fixed: <what was done>'"
    assert any(XID79 in line for line in d.evidence)
    assert by_node(r, "gpu003") == []  # the application XID never drains
    assert r.score is not None and r.score.drains.right == 3  # gpu017, gpu020, gpu021


def test_per_job_budget_holds_the_second_node_of_a_job(basic: Path) -> None:
    r = replay(load_history(basic), load_policy())
    assert by_node(r, "gpu020")[0] == ("drain", 1800.0)
    held = [d for d in r.decisions if d.node == "gpu021"]
    assert (held[0].action, held[0].wanted, held[0].budget.check) == (Verb.HOLD, Verb.DRAIN, "job")
    assert held[0].budget.detail == "job 4242 already lost 1 node(s); it survives 1"
    # the job ends at +6h: then gpu021 may go
    assert ("drain", 6 * HOUR) in by_node(r, "gpu021")
    assert r.held_steps["gpu021"] == (6 * HOUR - 1800) / 60
    assert r.score is not None and r.score.drains.missed == 0


def test_planned_reboot_is_not_an_alarm_unless_maintenance_is_ignored(basic: Path) -> None:
    honoured = replay(load_history(basic), load_policy())
    assert by_node(honoured, "gpu040") == []
    # ib.port-down alarms once the port stayed down 120 s (7401 s), and is reported again at
    # the gate's keep-alive re-check (7851 s): two reports inside the window
    assert honoured.suppressed == 2 and honoured.maintenance_windows == 1
    ignored = replay(load_history(basic, honour_maintenance=False), load_policy())
    assert by_node(ignored, "gpu040") == [("drain", 7440.0), ("resume", 7920.0 + 600)]
    drain = next(d for d in ignored.drains if d.node == "gpu040")
    assert (drain.kind, drain.rule) == ("ib_port_down", "needs-remediation")
    assert ignored.wrong_causes == {"planned_reboot": 1}
    text = "\n".join(render(ignored, load_history(basic, honour_maintenance=False)))
    assert "wrong drains by what the truth says happened: planned_reboot 1" in text


def test_budget_holds_a_slow_storm_and_the_breaker_trips_on_a_fast_one(tmp_path: Path) -> None:
    # one node every 2 minutes: never more than 10 % within the breaker's 600 s window, but the
    # global budget (10 % of 64 = 6 nodes out at most) holds the 7th and later
    kern = {f"gpu{i:03d}": [kline(T0 + 600 + 120 * i, XID79)] for i in range(1, 11)}
    root = write_dataset(tmp_path / "storm", kern=kern, days=0.25)
    r = replay(load_history(root), load_policy())
    assert [d.node for d in r.drains] == [f"gpu{i:03d}" for i in range(1, 7)]
    assert r.alerts == ()
    holds = [d for d in r.decisions if d.action is Verb.HOLD]
    assert {d.node for d in holds} == {f"gpu{i:03d}" for i in range(7, 11)}
    assert {d.budget.check for d in holds} == {"global"}
    assert holds[0].budget.detail.startswith("7/64 nodes unavailable would exceed")
    out: set[str] = set()
    most = 0
    for d in r.decisions:
        if d.action is Verb.DRAIN:
            out.add(d.node)
        elif d.action is Verb.RESUME:
            out.discard(d.node)
        most = max(most, len(out))
    assert most == 6
    # twenty at once: the storm breaker stops everything and says so once
    burst = {f"gpu{i:03d}": [kline(T0 + 600, XID79)] for i in range(1, 21)}
    r2 = replay(load_history(write_dataset(tmp_path / "burst", kern=burst, days=0.1)), load_policy())
    assert r2.drains == () and r2.by_hold_check == {"storm": 20}
    assert len(r2.alerts) == 1 and r2.alerts[0][1].startswith(
        "storm breaker: 20/64 nodes (31%) turned unhealthy within 600s")


def test_policy_diff_node_by_node(basic: Path) -> None:
    h = load_history(basic)
    b_policy = loads_policy('''
[[rule]]
name = "ignore-79"
kinds = ["xid"]
codes = [79]
do = "ignore"
examples = [{ kind = "xid", code = 79, severity = "critical", action = "reboot", expect = "ignore" }]
[[rule]]
name = "needs-remediation"
min_action = "reset_gpu"
do = "drain"
examples = [{ kind = "ib_port_down", severity = "critical", action = "inspect", expect = "drain" }]
[[ladder]]
step = "reboot"
timeout_s = 1800
[[ladder]]
step = "inspect"
''', "lax.toml")
    a, b = replay(h, load_policy()), replay(h, b_policy)
    diffs = diff(a, b, h)
    assert [(d.node, d.what, d.truth) for d in diffs] == [
        ("gpu017", "only_a", ("f1:gpu_off_bus",)), ("gpu020", "only_a", ("f4:gpu_off_bus",)),
        ("gpu021", "only_a", ("f5:gpu_off_bus",))]
    assert b.score is not None and b.score.drains.missed == 3
    lines = render_diff(a, b, diffs)
    assert lines[1] == "  only_a 3"
    assert "gpu017  only_a" in lines[3]


def gpu_report(node: str, t: float, bad: bool) -> dict[str, Any]:
    """A recorded agent report: its GPU check critical with Xid 79 when ``bad``, else OK."""
    f79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
           "message": "GPU has fallen off the bus", "line": XID79}
    status = "critical" if bad else "ok"
    return {"node": node, "time": t, "status": status,
            "checks": [{"check": "gpu", "status": status, "findings": [f79] if bad else []}]}


def test_recorded_history_goes_stale_like_live(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    root.mkdir()
    lines = []
    for k in range(0, 60):
        t = T0 + 60 * k
        lines += [{"node": f"gpu{n:03d}", "time": t, "status": "ok", "checks": []}
                  for n in (1, *range(3, 21))]
        if k < 2 or 5 <= k < 20 or k >= 35:  # gpu002 is silent 2..4 and 20..34
            lines.append(gpu_report("gpu002", t, 5 <= k < 20))
    (root / "reports.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    h = load_history(root)
    assert h.layout == "recorded" and len(h.nodes) == 20 and h.nodes[1] == "gpu002"
    r = replay(h, load_policy())
    # drained at its first critical report; silent (stale after 120 s) from minute 20 to 34 it
    # is UNKNOWN: no escalation at +1800 s and no healthy delay; that starts only when it reports
    # clean again at minute 35
    assert by_node(r, "gpu002") == [("drain", 300.0), ("resume", 35 * 60 + 600.0)]
    (root / "reports.jsonl").write_text('{"node": "gpu001", "time": 1}\nnot json\n')
    with pytest.raises(ParseError, match=r"reports.jsonl: line 2: not JSON"):
        load_history(root)
    (root / "reports.jsonl").write_text('{"node": "bad node;rm", "time": 1, "status": "ok"}\n')
    with pytest.raises(MinutiaeError):
        load_history(root)


def test_recorded_node_joins_at_its_first_report(tmp_path: Path) -> None:
    # The recorder starts with the controller; 20 agents' first reports arrive over 9.5 s and
    # gpu007's is critical. The live controller (Kubernetes: it knows only reporting nodes)
    # cordoned at once; the replay must not count the 13 nodes that had not reported yet as
    # silent and hold the drain on the global budget (max_unavailable_fraction 0.5).
    root = tmp_path / "rec"
    root.mkdir()
    lines = [gpu_report(f"gpu{n:03d}", T0 + 0.5 * (n - 1) + 60 * k, k == 0 and n == 7)
             for k in range(3) for n in range(1, 21)]
    (root / "reports.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    policy = loads_policy('dry_run = false\nhealthy_delay_s = 30\n'
                          '[[rule]]\nname = "remediate"\nmin_action = "reset_gpu"\ndo = "drain"\n'
                          'examples = [{ kind = "xid", code = 79, severity = "critical", '
                          'action = "reboot", expect = "drain" }]\n'
                          '[[ladder]]\nstep = "reboot"\ntimeout_s = 1800\n[[ladder]]\nstep = "inspect"\n'
                          '[budget]\nmax_unavailable_fraction = 0.5\n')
    r = replay(load_history(root), policy, step_s=1.0)
    assert by_node(r, "gpu007")[0] == ("drain", 3.0)
    assert not [d for d in r.decisions if d.action is Verb.HOLD]
    # a node that reported and then went quiet still counts (the stale test above)


def test_cli_json_and_errors(basic: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["backtest", str(basic), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["drains"] == 3 and doc["summary"]["right_drains"] == 3
    assert doc["nodes"]["gpu017"][0]["action"] == "drain"
    assert doc["score"]["drains"]["right"] == 3 and doc["score"]["drains"]["missed"] == 0
    assert main(["backtest", str(tmp_path / "nothing")]) == 3
    assert "nothing: not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["backtest", str(tmp_path / "empty")]) == 3
    assert "neither a simulated dataset" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rule]]\nname = 1\n")
    assert main(["backtest", str(basic), "--policy", str(bad)]) == 3
    assert "bad.toml" in capsys.readouterr().err


def test_json_document_is_complete(basic: Path) -> None:
    h = load_history(basic)
    doc = to_json(replay(h, load_policy()), h)
    assert doc["nodes_in_fleet"] == 64 and doc["layout"] == "simulated"
    assert [r["rule"] for r in doc["rules"]] == ["needs-remediation"]
    json.dumps(doc)


def test_fast_replay_decides_exactly_like_the_plain_one(tmp_path: Path) -> None:
    """On a real simulator dataset: skipping idle steps and hiding harmless findings changes
    nothing (same decisions, same times)."""
    from minutiae.sim.emit.writer import write_dataset as sim_write
    from minutiae.sim.world.plan import make_plan
    from minutiae.sim.world.profile import load_profile

    # fault rates x400 so that one day of 16 nodes holds drains, holds and a planned reboot
    sim_write(make_plan(load_profile(rate_scale=400.0), 16, 8, 1.0, 12, T0), tmp_path / "sim")
    for honour in (True, False):
        h = load_history(tmp_path / "sim", honour_maintenance=honour)
        fast, plain = replay(h, load_policy()), replay(h, load_policy(), fast=False)
        assert fast.decisions == plain.decisions and fast.drains == plain.drains
        assert len(plain.drains) >= 2 and plain.count(Verb.HOLD) >= 5  # 10 % of 16: one at a time
        assert plain.steps == 1441 and fast.steps < plain.steps


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=80), st.builds(json.dumps, st.dictionaries(
    st.sampled_from(["node", "time", "status", "checks", "findings", "domains"]),
    st.one_of(st.none(), st.integers(), st.text(max_size=10), st.lists(st.integers(), max_size=2)),
    max_size=6))), min_size=1, max_size=8))
def test_recorded_garbage_is_a_clear_error(tmp_path_factory: pytest.TempPathFactory,
                                           lines: list[str]) -> None:
    root = tmp_path_factory.mktemp("rec")
    (root / "reports.jsonl").write_text("\n".join(x.replace("\n", " ") for x in lines) + "\n")
    try:
        h = load_history(root)
    except MinutiaeError as exc:
        assert "reports.jsonl" in str(exc)  # the message names the file (and the line)
    else:
        replay(h, load_policy())


@pytest.mark.parametrize("name, text, needle", [
    ("maintenance.csv", "time,node,what\nsoon,gpu001,reboot\n", "maintenance.csv: line 2: time 'soon'"),
    ("maintenance.csv", "when,who\n1,gpu001\n", "maintenance.csv: line 1: missing column(s) time, node"),
    ("jobs.csv", "job_id,start,end,nodes\n1,a,b,gpu001\n", "jobs.csv: line 2: start 'a' is not a number"),
    ("meta.json", "{not json", "meta.json: not JSON"),
    ("meta.json", '{"start": "x"}', "meta.json: needs numeric start and end"),
    ("truth.jsonl", '{"id": 1}\n', "truth.jsonl: line 1: not a truth record"),
    ("fleet.csv", "host\ngpu001\n", "fleet.csv: line 1: missing column(s) node"),
])
def test_bad_dataset_files_are_named(tmp_path: Path, name: str, text: str, needle: str) -> None:
    root = write_dataset(tmp_path / "ds", nodes=4, days=0.01)
    (root / name).write_text(text)
    with pytest.raises(MinutiaeError) as err:
        load_history(root)
    assert needle in str(err.value) and str(root) in str(err.value)


def test_repeat_rules_of_the_agent_engine_drain_and_clear(tmp_path: Path) -> None:
    """log_counts.toml as the agent runs it: three link-downs within an hour are flapping
    (inspect) although each one alone is a warning; the alarm clears after the window and the
    clear delay, then the node returns after the healthy delay. Two soft lockups are not three."""
    down = "mlx5_core 0000:9d:00.1 enp157s0f1np1: Link down"
    lockup = "watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python:48211]"
    root = write_dataset(tmp_path / "ds", days=0.25, kern={
        "gpu010": [kline(T0 + 600 * k, down, "info") for k in (1, 2, 3)],
        "gpu011": [kline(T0 + 600 * k, lockup, "warn") for k in (1, 2)],
    })
    r = replay(load_history(root), load_policy())
    assert by_node(r, "gpu011") == []
    # the first link-down leaves the 3600 s window at +4200 s, the alarm clears 1800 s later
    # (+6001 s: the step at +6060 s sees it clean) and the healthy delay is 600 s
    assert by_node(r, "gpu010") == [("drain", 1800.0), ("resume", 6660.0)]
    d = r.decisions[0]
    # the engine's finding: error/inspect, where each link-down alone is warning/none
    assert d.evidence[0].startswith("[error/inspect] ib_link 0000:9d:00.1: "), d.evidence
    assert r.drains[0].kind == "ib_link"


def test_reading_in_worker_processes_gives_the_same_history(tmp_path: Path) -> None:
    kern = {f"gpu{i:03d}": [kline(T0 + 60 * i, XID79)] for i in range(1, 129, 9)}
    ib = {f"gpu{i:03d}": ib_rows(T0 + 600, "1: DOWN", ("mlx5_0", "mlx5_1"), full=False)
          for i in range(2, 129, 7)}  # two ports at once: their findings' order must not vary
    root = write_dataset(tmp_path / "ds", nodes=128, days=0.1, kern=kern, ib=ib,
                         maintenance=[(T0 + 300, "gpu002")])
    one, two = load_history(root), load_history(root, jobs=2)
    assert one.events == two.events and one.suppressed == two.suppressed
    two_ports = [e for e in one.events if e.report is not None and {
        f.component for f in e.report.findings} == {"ib:mlx5_0/1", "ib:mlx5_1/1"}]
    assert len(two_ports) == 19  # gpu002's comes when its maintenance window ends
