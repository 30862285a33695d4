"""Running a counter rule's examples (pure): the instantaneous ``[[rule.example]]`` tables
(values → fires) and, for a gated rule, its ``sequence`` examples (checks at given times →
alarmed after the last one, through the check engine). The loader runs them on every rule it
builds, so a catalog whose examples do not behave as written does not load."""

from __future__ import annotations

from typing import Any

from minutiae.rules.counters.gate import run_sequence
from minutiae.rules.counters.model import Context, CounterRule, Values, judge, rule_error


def run_examples(rule: CounterRule, examples: Any, where: str) -> None:
    """Each example: ``values`` (metric → value on one component), optional ``previous``
    (metric → value one ``elapsed_s`` ago, default 3600 s), optional ``peers`` (list of value
    tables of other components), optional ``node`` (the node's values, read by conditions on
    ``node.<metric>``, e.g. ``node = { uptime_s = 60 }``), and ``fires`` (bool)."""
    if not isinstance(examples, list) or not any(isinstance(e, dict) and e.get("fires") for e in examples):
        raise rule_error(where, rule.id, "needs [[rule.example]] tables, at least one with fires = true")
    comp = "node" if rule.component == "node" else f"{rule.component}:example"
    for n, ex in enumerate(examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("values"), dict) or not isinstance(ex.get("fires"), bool):
            raise rule_error(where, rule.id, f"example #{n} needs values = {{...}} and fires = true/false")
        now = 1_000_000.0
        elapsed = float(ex.get("elapsed_s", 3600.0))
        values: dict[str, Values] = {comp: ex["values"]}
        for j, peer in enumerate(ex.get("peers", [])):
            values[f"{rule.component}:peer{j}"] = peer
        if isinstance(ex.get("node"), dict) and comp != "node":  # node.<metric> values
            values["node"] = ex["node"]
        previous = {(comp, m): (float(v), now - elapsed) for m, v in ex.get("previous", {}).items()}
        # the condition (for a flap rule too: its examples say when the condition holds)
        got = [v for v in judge([rule], Context(values, previous, now)) if v.holds and v.component == comp]
        if bool(got) != ex["fires"]:
            raise rule_error(where, rule.id, f"example #{n} should {'' if ex['fires'] else 'not '}fire: {ex}")


def run_sequences(rule: CounterRule, sequences: Any, where: str) -> None:
    """Each sequence example: ``steps`` (a list of ``{ t = seconds, values = {...} }``, one
    check each, in time order) and ``alarm`` (bool: alarmed after the last step); optional
    ``peers``. At least one must alarm and one must not (the gate is proven both ways)."""
    if sequences is None:
        return
    if not isinstance(sequences, list) or not sequences:
        raise rule_error(where, rule.id, "sequence must be a list of { steps = [...], alarm = ... }")
    seen: set[bool] = set()
    for n, ex in enumerate(sequences):
        steps = ex.get("steps") if isinstance(ex, dict) else None
        if not isinstance(steps, list) or not steps or not isinstance(ex.get("alarm"), bool):
            raise rule_error(where, rule.id, f"sequence #{n} needs steps = [...] and alarm = true/false")
        parsed: list[tuple[float, dict[str, Any]]] = []
        for s in steps:
            t = s.get("t") if isinstance(s, dict) else None
            if (isinstance(t, bool) or not isinstance(t, int | float) or not isinstance(s.get("values"), dict)
                    or (parsed and t < parsed[-1][0])):
                raise rule_error(where, rule.id, f"sequence #{n}: each step needs t (seconds, in "
                            f"order) and values = {{...}} (got {s!r})")
            parsed.append((float(t), s["values"]))
        got = run_sequence(rule, parsed, ex.get("peers", []))
        if got != ex["alarm"]:
            raise rule_error(where, rule.id, f"sequence #{n} should {'' if ex['alarm'] else 'not '}"
                        f"alarm after its last step: {ex}")
        seen.add(got)
    if seen != {True, False}:
        raise rule_error(where, rule.id, "needs sequence examples that alarm and that do not")
