"""Slack incoming-webhook messages (Block Kit) for the controller's decisions.

- One message per new decision: node, what was done, the rule, the evidence lines, the budget's
  verdict and the exact undo command (``decision_message``).
- A storm of decisions in one step (``rollup_at`` or more, or any alert such as a tripped storm
  breaker) becomes ONE roll-up message: alerts first, then one line per (action, rule, budget
  check) group with the nodes as a compact hostlist (``gpu[001-040]``) (``rollup_message``).
- A lemon node (drained again and again) that finally reports healthy gets a celebratory
  ``:meow_party:`` message with the command that returns it to service (``lemon_message``).

Slack's limits are respected (header 150 chars, section text 3000, ≤ 10 fields, ≤ 50 blocks) and
``&``, ``<``, ``>`` in log lines are escaped so a kernel line never turns into a broken link.
Delivery (outbox, retries, backoff) is ``webhook.Poster``'s. Registered as ``slack``
(``MINUTIAE_SLACK_WEBHOOK``) in ``NOTIFIERS``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from minutiae.controller.notify.base import Notifier, NotifyContext
from minutiae.controller.notify.webhook import Outbox, Poster
from minutiae.controller.state import Decision, Verb, undo_command

log = logging.getLogger("minutiae.notify")

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_EVIDENCE_LINES = 10
LEMON_EMOJI = ":meow_party:"
_EMOJI = {Verb.DRAIN: ":no_entry:", Verb.RESUME: ":white_check_mark:",
          Verb.ESCALATE: ":arrow_double_up:", Verb.HOLD: ":double_vertical_bar:",
          Verb.RESOLVE: ":wrench:"}
_PAST = {Verb.DRAIN: "Drained", Verb.RESUME: "Resumed", Verb.ESCALATE: "Escalated",
         Verb.HOLD: "Held", Verb.RESOLVE: "Resolved"}
_NUM = re.compile(r"^(.*?)(\d+)$")


def escape(text: str) -> str:
    """Slack mrkdwn control characters (``&``, ``<``, ``>``) as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": _cut(text, MAX_HEADER),
                                       "emoji": True}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, MAX_SECTION)}}


def _code(lines: Sequence[str]) -> str:
    body = "\n".join(escape(ln).replace("```", "'''") for ln in lines)
    return "```" + _cut(body, MAX_SECTION - 40) + "```"


def hostlist(names: Sequence[str]) -> str:
    """Compact node list: ``gpu001,gpu002,gpu003,gpu007`` → ``gpu[001-003,007]``."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for n in sorted(set(names)):
        m = _NUM.match(n)
        if m:
            groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
        else:
            plain.append(n)
    out: list[str] = []
    for (prefix, width), nums in sorted(groups.items()):
        nums.sort()
        ranges: list[str] = []
        start = prev = nums[0]
        for x in [*nums[1:], None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            a, b = f"{start:0{width}d}", f"{prev:0{width}d}"
            ranges.append(a if start == prev else f"{a}-{b}")
            if x is not None:
                start = prev = x
        out.append(f"{prefix}{ranges[0]}" if len(nums) == 1 else f"{prefix}[{','.join(ranges)}]")
    return ",".join(out + plain)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def _title(d: Decision) -> str:
    if d.action is Verb.HOLD:
        wanted = d.wanted.value if d.wanted else "act on"
        return f"{_EMOJI[d.action]} Held: wanted to {wanted} {d.node}"
    step = f" → {d.step.label}" if d.step is not None and d.action is not Verb.RESUME else ""
    return f"{_EMOJI[d.action]} {_PAST[d.action]} {d.node}{step}"


def decision_message(d: Decision, dry_run: bool = False) -> dict[str, Any]:
    """The Block Kit message for one decision."""
    mode = " (dry-run: the scheduler was not touched)" if dry_run else ""
    budget = ("allowed" if d.budget.allowed else f"*held by `{escape(d.budget.check)}`*")
    fields = [
        {"type": "mrkdwn", "text": f"*Node*\n`{escape(d.node)}`"},
        {"type": "mrkdwn", "text": f"*Rule*\n`{escape(d.rule)}`"},
        {"type": "mrkdwn", "text": _cut(f"*Budget*\n{budget}: {escape(d.budget.detail)}", 2000)},
        {"type": "mrkdwn", "text": f"*Step*\n{d.step.label if d.step else '–'}"},
    ]
    blocks: list[dict[str, Any]] = [_header(_title(d)),
                                    {"type": "section", "fields": fields}]
    if d.reason:
        blocks.append(_section(f"*Scheduler reason*\n`{escape(d.reason)}`"))
    if d.evidence:
        shown = list(d.evidence[:MAX_EVIDENCE_LINES])
        more = len(d.evidence) - len(shown)
        if more > 0:
            shown.append(f"… and {more} more line(s): minutiae explain {d.node}")
        blocks.append(_section("*Evidence*\n" + _code(shown)))
    blocks.append(_section(f"*Undo*\n`{escape(d.undo)}`"))
    blocks.append(buttons(d))
    blocks.append({"type": "context", "elements": [
        {"type": "mrkdwn", "text": f"minutiae · {_when(d.time)}{mode} · `minutiae explain {d.node}`"}]})
    text = f"minutiae: {_PAST[d.action].lower()} {d.node} (rule {d.rule}){mode}"
    return {"text": text, "blocks": blocks}


def buttons(d: Decision) -> dict[str, Any]:
    """Undo / resolve / pause, answered by the controller's ``/slack/actions``
    (``controller/http/slack.py``, signed requests only; audited with the Slack user)."""

    def b(text: str, action: str, style: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "button", "text": {"type": "plain_text", "text": text},
                               "action_id": action, "value": d.node}
        if style:
            out["style"] = style
        return out

    els = [b("Resolve", "minutiae_resolve", "primary"),
           b("Pause minutiae", "minutiae_pause", "danger")]
    if d.action is Verb.DRAIN:
        els.insert(0, b("Undo (resume now)", "minutiae_undo"))
    return {"type": "actions", "block_id": f"minutiae:{d.node}", "elements": els}


def rollup_message(decisions: Sequence[Decision], alerts: Sequence[str], now: float,
                   dry_run: bool = False) -> dict[str, Any]:
    """One message for a storm: alerts, then one line per (action, rule, budget check)."""
    groups: dict[tuple[str, str, str], list[Decision]] = {}
    for d in decisions:
        groups.setdefault((d.action.value, d.rule, d.budget.check), []).append(d)
    n = len({d.node for d in decisions})
    title = f":rotating_light: minutiae: {n} node(s) in one step" if n else \
        ":rotating_light: minutiae alert"
    blocks: list[dict[str, Any]] = [_header(title)]
    for a in alerts:
        blocks.append(_section(f":warning: *{escape(a)}*"))
    room = MAX_BLOCKS - len(blocks) - 2
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    for (_action, rule, check), ds in ordered[:room]:
        d0 = ds[0]
        verb = f"held ({d0.wanted.value if d0.wanted else 'act'})" if d0.action is Verb.HOLD \
            else _PAST[d0.action].lower()
        budget = "budget ok" if d0.budget.allowed else f"held by `{escape(check)}`: {escape(d0.budget.detail)}"
        nodes = hostlist([d.node for d in ds])
        blocks.append(_section(f"*{len(ds)} {verb}* · rule `{escape(rule)}` · {budget}\n"
                               f"`{escape(nodes)}`"))
    if len(ordered) > room:
        blocks.append(_section(f"… and {len(ordered) - room} more group(s): `minutiae nodes`"))
    mode = " (dry-run)" if dry_run else ""
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text":
                   f"minutiae · {_when(now)}{mode} · details: `minutiae status`, "
                   "`minutiae explain NODE` · resume after a storm: `minutiae unpause`"}]})
    summary = ", ".join(f"{len(ds)} {a}" for (a, _r, _c), ds in ordered)
    text = f"minutiae: {n} node(s) in one step ({summary})" + (f"; {alerts[0]}" if alerts else "")
    return {"text": _cut(text, 3000), "blocks": blocks}


def lemon_message(d: Decision, scheduler: str) -> dict[str, Any]:
    """The celebration: a lemon that needed a human finally reports healthy."""
    cmd = undo_command(scheduler, Verb.DRAIN, d.node)
    blocks = [
        _header(f"{LEMON_EMOJI} {d.node} is healthy again!"),
        _section(f"Lemon node `{escape(d.node)}` finally reports healthy. "
                 f"{escape(d.budget.detail or (d.evidence[0] if d.evidence else ''))}"),
        _section(f"*Return it to service* once the inspection is signed off:\n`{escape(cmd)}`"),
        {"type": "context", "elements": [{"type": "mrkdwn", "text":
                                          f"minutiae · {_when(d.time)} {LEMON_EMOJI}"}]},
    ]
    return {"text": f"{LEMON_EMOJI} lemon {d.node} is healthy again", "blocks": blocks}


def is_lemon_recovery(d: Decision) -> bool:
    """A lemon that reports healthy: reconcile holds its resume for a human (check ``lemon``)."""
    return d.action is Verb.HOLD and d.wanted is Verb.RESUME and d.budget.check == "lemon"


@dataclass
class SlackNotifier:
    """``Notifier`` posting to a Slack incoming webhook (see the module docstring).

    ``scheduler`` names the backend for the commands in lemon messages; ``dry_run`` marks
    messages when the controller does not act."""

    webhook_url: str
    poster: Poster
    scheduler: str = "slurm"
    dry_run: bool = False
    rollup_at: int = 5
    celebrated: set[str] = field(default_factory=set)

    def messages(self, decisions: Sequence[Decision], alerts: Sequence[str]) -> list[dict[str, Any]]:
        fresh = [d for d in decisions if d.new]
        out: list[dict[str, Any]] = []
        lemons = [d for d in fresh if is_lemon_recovery(d)]
        for d in lemons:
            if d.node not in self.celebrated:
                self.celebrated.add(d.node)
                out.append(lemon_message(d, self.scheduler))
        for d in fresh:  # a lemon drained again may be celebrated again next time
            if d.action is Verb.DRAIN:
                self.celebrated.discard(d.node)
        rest = [d for d in fresh if not is_lemon_recovery(d)]
        if alerts or len(rest) >= self.rollup_at:
            out.append(rollup_message(rest, alerts, self.poster.clock.now(), self.dry_run))
        else:
            out.extend(decision_message(d, self.dry_run) for d in rest)
        return out

    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        try:
            msgs = self.messages(decisions, alerts)
            if msgs:
                self.poster.post(self.webhook_url, msgs)
            else:
                self.poster.flush()
        except Exception as exc:  # never stop remediation
            log.exception("notify: slack failed: %s", exc)


def from_env(url: str, env: Mapping[str, str], ctx: NotifyContext) -> Notifier:
    """``MINUTIAE_SLACK_WEBHOOK`` (a Slack incoming webhook URL) → a ``SlackNotifier``."""
    return SlackNotifier(url, Poster(ctx.clock, Outbox(ctx.outbox_path("slack"))),
                         scheduler=ctx.scheduler, dry_run=ctx.dry_run)
