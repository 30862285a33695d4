"""Slack and generic webhook notifiers against a local HTTP server (stdlib http.server in a
thread on 127.0.0.1) standing in for the endpoint: assertions are on the JSON it received."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.controller.budget import BudgetVerdict
from minutiae.controller.notify.slack import (
    LEMON_EMOJI,
    MAX_BLOCKS,
    SlackNotifier,
    decision_message,
    hostlist,
    rollup_message,
)
from minutiae.controller.notify.webhook import Outbox, Poster, WebhookNotifier
from minutiae.controller.policy import load_policy
from minutiae.controller.reconcile import reconcile
from minutiae.controller.state import Decision, FleetState, NodeView, Report, Verb
from minutiae.model import Action, Finding, Severity, Status
from minutiae.schedulers.base import NodeSchedState, NodeState
from minutiae.testing import FakeClock
from webhook_endpoint import Endpoint


@pytest.fixture()
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint()
    yield ep
    ep.close()


def drain(node: str, t: float = 1_780_000_000.0, **kw: Any) -> Decision:
    base: dict[str, Any] = dict(
        node=node, action=Verb.DRAIN, rule="needs-remediation",
        evidence=("[critical/reboot] xid 79 gpu:0000:18:00.0: NVRM: Xid (PCI:0000:18:00): 79, "
                  "pid=<unknown>, GPU has fallen off the bus.",),
        budget=BudgetVerdict(True, "ok", "1/64 unavailable within limit 6"),
        undo=f"scontrol update NodeName={node} State=RESUME", time=t, step=Action.REBOOT,
        reason="minutiae: needs-remediation xid 79 -> reboot")
    base.update(kw)
    return Decision(**base)


def slack(endpoint: Endpoint, clock: FakeClock, **kw: Any) -> SlackNotifier:
    return SlackNotifier(endpoint.url, Poster(clock, backoff_s=2.0), **kw)


def section(blocks: list[dict[str, Any]], prefix: str) -> str:
    [text] = [b["text"]["text"] for b in blocks
              if b["type"] == "section" and "text" in b and b["text"]["text"].startswith(prefix)]
    return str(text)


def texts(msg: dict[str, Any]) -> str:
    return json.dumps(msg)


def test_one_decision_is_one_block_kit_message_with_evidence_rule_budget_undo(
        endpoint: Endpoint) -> None:
    n = slack(endpoint, FakeClock())
    n.notify([drain("gpu017")])
    [msg] = endpoint.posted
    assert msg["text"] == "minutiae: drained gpu017 (rule needs-remediation)"
    blocks = msg["blocks"]
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text",
                                                   "text": ":no_entry: Drained gpu017 → reboot",
                                                   "emoji": True}}
    fields = [f["text"] for f in blocks[1]["fields"]]
    assert fields[:2] == ["*Node*\n`gpu017`", "*Rule*\n`needs-remediation`"]
    assert fields[2] == "*Budget*\nallowed: 1/64 unavailable within limit 6"
    evidence = section(blocks, "*Evidence*")
    # the kernel line's <unknown> is escaped, never read by Slack as a link
    assert "pid=&lt;unknown&gt;, GPU has fallen off the bus." in evidence
    assert "<unknown>" not in texts(msg)
    assert section(blocks, "*Undo*") == "*Undo*\n`scontrol update NodeName=gpu017 State=RESUME`"
    assert endpoint.headers[0]["Content-Type"] == "application/json"


def test_storm_of_40_is_one_rollup_message(endpoint: Endpoint) -> None:
    clock = FakeClock()
    alert = ("storm breaker: 40/64 nodes (62%) turned unhealthy within 600s (threshold 10%); "
             "stopped acting, waiting for a human (minutiae unpause)")
    held = [drain(f"gpu{i:03d}", action=Verb.HOLD, wanted=Verb.DRAIN,
                  budget=BudgetVerdict(False, "storm", alert)) for i in range(1, 41)]
    n = slack(endpoint, clock)
    n.notify(held, [alert])
    assert len(endpoint.posted) == 1
    msg = endpoint.posted[0]
    assert msg["blocks"][0]["text"]["text"] == ":rotating_light: minutiae: 40 node(s) in one step"
    assert msg["blocks"][1]["text"]["text"] == f":warning: *{alert}*"
    group = msg["blocks"][2]["text"]["text"]
    assert group.startswith("*40 held (drain)* · rule `needs-remediation` · held by `storm`")
    assert group.endswith("`gpu[001-040]`")
    assert msg["text"].startswith("minutiae: 40 node(s) in one step (40 hold); storm breaker")
    # the next step repeats the holds (new=False): nothing more is posted
    n.notify([drain(d.node, action=Verb.HOLD, wanted=Verb.DRAIN, new=False,
                    budget=d.budget) for d in held])
    assert len(endpoint.posted) == 1


def test_rollup_threshold_and_mixed_groups(endpoint: Endpoint) -> None:
    n = slack(endpoint, FakeClock(), rollup_at=5)
    four = [drain(f"gpu{i:03d}") for i in (1, 2, 3, 7)]
    n.notify(four)
    assert len(endpoint.posted) == 4  # below the threshold: one message each
    mixed = [drain(f"gpu{i:03d}") for i in range(10, 14)] + [
        drain(f"gpu{i:03d}", action=Verb.HOLD, wanted=Verb.DRAIN,
              budget=BudgetVerdict(False, "domain:rack", "2 node(s) of rack r1 already unavailable; cap 2"))
        for i in (20, 21)]
    n.notify(mixed)
    assert len(endpoint.posted) == 5
    roll = endpoint.posted[-1]
    lines = [b["text"]["text"] for b in roll["blocks"] if b["type"] == "section"]
    assert lines[0] == "*4 drained* · rule `needs-remediation` · budget ok\n`gpu[010-013]`"
    assert lines[1].startswith("*2 held (drain)* · rule `needs-remediation` · held by `domain:rack`: 2 node(s)")
    assert lines[1].endswith("`gpu[020-021]`")


def test_lemon_recovery_is_celebrated_once(endpoint: Endpoint) -> None:
    n = slack(endpoint, FakeClock(), scheduler="kubernetes")
    detail = "lemon node: 3 drains within 7 days; needs hardware inspection and a human to resume"
    lemon = drain("gpu033", action=Verb.HOLD, wanted=Verb.RESUME, rule="lemon",
                  budget=BudgetVerdict(False, "lemon", detail), evidence=(detail,),
                  undo="nothing was done")
    n.notify([lemon])
    n.notify([drain("gpu033", action=Verb.HOLD, wanted=Verb.RESUME, rule="lemon", new=False,
                    budget=BudgetVerdict(False, "lemon", detail))])
    [msg] = endpoint.posted
    assert msg["text"] == f"{LEMON_EMOJI} lemon gpu033 is healthy again"
    assert msg["blocks"][0]["text"]["text"] == f"{LEMON_EMOJI} gpu033 is healthy again!"
    # the undo is minutiae's own resolve (a full undo: taint and annotations go too)
    assert "`minutiae resolve gpu033 --now" in msg["blocks"][2]["text"]["text"]
    assert detail in msg["blocks"][1]["text"]["text"]


def test_failures_never_raise_and_are_retried_with_backoff_in_order(endpoint: Endpoint) -> None:
    clock = FakeClock()
    poster = Poster(clock, backoff_s=2.0)
    n = SlackNotifier(endpoint.url, poster)
    endpoint.script = [(500, "internal", {}), (0, "", {})]
    n.notify([drain("gpu001")])  # 500: kept
    assert len(poster.outbox) == 1 and poster.outbox.items[0].attempts == 1
    assert poster.outbox.items[0].next_at == clock.now() + 2.0
    n.notify([drain("gpu002")])  # gpu001 not due yet; gpu002's post is dropped mid-air: kept
    assert [p.payload["text"].split()[2] for p in poster.outbox.items] == ["gpu001", "gpu002"]
    clock.advance(1.0)
    assert poster.flush() == 0 and len(endpoint.posted) == 0
    clock.advance(5.0)
    assert poster.flush() == 2
    assert [m["text"].split()[2] for m in endpoint.posted] == ["gpu001", "gpu002"]
    assert len(poster.outbox) == 0 and not poster.dead
    poster.flush()
    assert len(endpoint.posted) == 2  # delivered once, never twice


def test_429_retry_after_is_honoured_and_400_is_not_retried(endpoint: Endpoint) -> None:
    clock = FakeClock()
    poster = Poster(clock)
    endpoint.script = [(429, "rate_limited", {"Retry-After": "30"}), (400, "invalid_payload", {})]
    poster.post(endpoint.url, [{"text": "a"}])
    assert poster.outbox.items[0].next_at == clock.now() + 30
    clock.advance(29)
    poster.flush()
    assert endpoint.attempts == 1 and not endpoint.bodies
    poster.post(endpoint.url, [{"text": "b"}])  # not due "a" waits; "b" gets the 400
    assert [p.payload for p in poster.dead] == [{"text": "b"}]
    assert poster.dead[0].last_error == "HTTP 400: invalid_payload"
    clock.advance(2)
    assert poster.flush() == 1 and endpoint.posted[-1] == {"text": "a"}


def test_endpoint_down_gives_up_after_max_attempts(endpoint: Endpoint) -> None:
    clock = FakeClock()
    url = endpoint.url
    endpoint.close()
    poster = Poster(clock, max_attempts=3, backoff_s=1.0, timeout=1.0)
    n = WebhookNotifier(url, poster)
    n.notify([drain("gpu005")])
    for _ in range(5):
        clock.advance(600)
        n.notify([])
    assert len(poster.outbox) == 0 and len(poster.dead) == 1
    assert poster.dead[0].attempts == 3 and "ConnectError" in poster.dead[0].last_error


def test_outbox_survives_a_restart(endpoint: Endpoint, tmp_path: Path) -> None:
    path = tmp_path / "outbox.json"
    clock = FakeClock()
    endpoint.script = [(503, "down", {})]
    p1 = Poster(clock, outbox=Outbox(path))
    SlackNotifier(endpoint.url, p1).notify([drain("gpu009")])
    assert json.loads(path.read_text())[0]["attempts"] == 1
    p2 = Poster(clock, outbox=Outbox(path))  # the controller restarted
    clock.advance(10)
    assert p2.flush() == 1
    assert endpoint.posted[-1]["text"] == "minutiae: drained gpu009 (rule needs-remediation)"
    assert json.loads(path.read_text()) == []
    path.write_text("{garbage")
    assert len(Outbox(path)) == 0  # unreadable outbox: logged, started empty, no crash


def test_generic_webhook_document_and_signature(endpoint: Endpoint) -> None:
    clock = FakeClock(start=1_780_000_100.0)
    n = WebhookNotifier(endpoint.url, Poster(clock, secret="s3cret"))
    d = drain("gpu042")
    n.notify([d, drain("gpu043", action=Verb.HOLD, wanted=Verb.DRAIN, new=False,
                       budget=BudgetVerdict(False, "rate:drain", "spent"))], ["an alert"])
    [doc] = endpoint.posted
    assert doc == {"source": "minutiae", "time": 1_780_000_100.0, "alerts": ["an alert"],
                   "decisions": [d.to_json()]}
    sig = hmac.new(b"s3cret", endpoint.bodies[0], hashlib.sha256).hexdigest()
    assert endpoint.headers[0]["X-Minutiae-Signature"] == f"sha256={sig}"
    n.notify([])
    assert len(endpoint.posted) == 1  # nothing new: nothing posted


def test_real_reconcile_decision_in_slack(endpoint: Endpoint) -> None:
    """A decision made by the real reconcile step, with the default policy, as Slack shows it."""
    now = 1_780_000_000.0
    policy = load_policy()
    f = Finding(kind="xid", severity=Severity.CRITICAL, action=Action.REBOOT, code=79,
                pci="0000:18:00.0", message="GPU has fallen off the bus",
                line="NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.")
    nodes = {f"gpu{i:03d}": NodeView(f"gpu{i:03d}", Report(f"gpu{i:03d}", now, Status.OK),
                                     NodeState(f"gpu{i:03d}", NodeSchedState.AVAILABLE))
             for i in range(1, 65)}
    nodes["gpu017"] = NodeView("gpu017", Report("gpu017", now, Status.CRITICAL, (f,)),
                               NodeState("gpu017", NodeSchedState.AVAILABLE))
    plan = reconcile(FleetState(nodes), policy, now)
    SlackNotifier(endpoint.url, Poster(FakeClock(start=now)), dry_run=plan.dry_run).notify(plan.decisions)
    [msg] = endpoint.posted
    body = texts(msg)
    assert "Drained gpu017" in body and "needs-remediation" in body
    assert "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus." in body
    assert "minutiae resolve gpu017 --now" in body
    assert "dry-run: the scheduler was not touched" in body


def test_hostlist() -> None:
    assert hostlist(["gpu003", "gpu001", "gpu002", "gpu007", "login1", "gpu007"]) == \
        "gpu[001-003,007],login1"
    assert hostlist(["n9", "n10", "n11"]) == "n9,n[10-11]"
    assert hostlist(["a"]) == "a"


def _limits_ok(msg: dict[str, Any]) -> None:
    blocks = msg["blocks"]
    assert 1 <= len(blocks) <= MAX_BLOCKS
    for b in blocks:
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= 150
        if b["type"] == "section":
            if "text" in b:
                assert len(b["text"]["text"]) <= 3000
            assert len(b.get("fields", [])) <= 10
            assert all(len(f["text"]) <= 2000 for f in b.get("fields", []))
    assert len(msg["text"]) <= 3000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=12, alphabet="abcxyz019-"),
                          st.sampled_from(list(Verb)), st.text(max_size=300),
                          st.lists(st.text(max_size=500), max_size=30)), max_size=80),
       st.lists(st.text(max_size=400), max_size=3))
def test_messages_stay_within_slack_limits(items: list[tuple[str, Verb, str, list[str]]],
                                           alerts: list[str]) -> None:
    ds = [drain(node, action=verb, rule=rule or "r", evidence=tuple(ev),
                budget=BudgetVerdict(verb is not Verb.HOLD, "global", rule * 10))
          for node, verb, rule, ev in items]
    for d in ds:
        _limits_ok(decision_message(d))
    _limits_ok(rollup_message(ds, alerts, 0.0))


def test_notifiers_from_env(endpoint: Endpoint, tmp_path: Path) -> None:
    from minutiae.controller.notify import notifiers_from_env
    from minutiae.errors import ConfigError

    assert notifiers_from_env({}, FakeClock()) == []
    env = {"MINUTIAE_SLACK_WEBHOOK": endpoint.url, "MINUTIAE_WEBHOOK_URL": endpoint.url + "/hook",
           "MINUTIAE_WEBHOOK_SECRET": "k"}
    slack_n, hook_n = notifiers_from_env(env, FakeClock(), scheduler="kubernetes",
                                         outbox_dir=tmp_path)
    assert isinstance(slack_n, SlackNotifier) and slack_n.scheduler == "kubernetes"
    assert isinstance(hook_n, WebhookNotifier) and hook_n.poster.secret == "k"
    endpoint.script = [(503, "down", {})]
    slack_n.notify([drain("gpu001")])
    assert (tmp_path / "notify-outbox-slack.json").is_file()
    with pytest.raises(ConfigError, match="MINUTIAE_SLACK_WEBHOOK: not an http"):
        notifiers_from_env({"MINUTIAE_SLACK_WEBHOOK": "file:///etc/passwd"}, FakeClock())


def test_notifier_registry_one_line_each(tmp_path: Path) -> None:
    """Each registered notifier is turned on by its own variable alone and is built by its
    module's ``from_env``; unset or blank variables build nothing."""
    from minutiae.controller.notify import NOTIFIERS, notifiers_from_env

    assert [(e.name, e.env) for e in NOTIFIERS] == [
        ("slack", "MINUTIAE_SLACK_WEBHOOK"), ("webhook", "MINUTIAE_WEBHOOK_URL")]
    kinds = {"slack": SlackNotifier, "webhook": WebhookNotifier}
    for e in NOTIFIERS:
        [n] = notifiers_from_env({e.env: "https://hooks.example.test/x"}, FakeClock(),
                                 outbox_dir=tmp_path)
        assert isinstance(n, kinds[e.name])
        assert notifiers_from_env({e.env: "  "}, FakeClock()) == []
